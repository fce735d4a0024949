"""CSV exports are safe to open in a spreadsheet: one helper neutralises formula-like cells, and every
module that writes CSV goes through it."""

from __future__ import annotations

import ast
import csv
import io
from pathlib import Path

import pytest

from portal.csv_export import csv_writer, neutralise_cell

ROOT = Path(__file__).resolve().parents[2]
APPS = ("portal", "quotas", "scheduling", "codespaces", "dashboards")
HELPER = ROOT / "portal" / "csv_export.py"


@pytest.mark.parametrize(
    "value",
    ['=HYPERLINK("http://evil","x")', "+1+A1", "-2+A1", "@SUM(A1)", "\tcmd", "\rcmd", "=1"],
)
def test_a_cell_starting_like_a_formula_is_prefixed_with_a_quote(value: str) -> None:
    assert neutralise_cell(value) == "'" + value


@pytest.mark.parametrize("value", ["A100", "", "team-a", "a=b", "-1.5", "+3", "-2e3", 12, -4, None])
def test_text_and_plain_numbers_are_left_unchanged(value: object) -> None:
    assert neutralise_cell(value) == value


def test_the_writer_neutralises_every_cell_of_every_row() -> None:
    out = io.StringIO()
    writer = csv_writer(out)
    writer.writerow(["model", "hours"])
    writer.writerows([["=cmd|' /C calc'!A0", "-1.250"], ["A100", 3]])
    assert list(csv.reader(io.StringIO(out.getvalue()))) == [
        ["model", "hours"],
        ["'=cmd|' /C calc'!A0", "-1.250"],
        ["A100", "3"],
    ]


def _csv_writer_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "csv"
        and node.attr in ("writer", "DictWriter")
    ]


def test_no_module_writes_csv_except_through_the_helper() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if path != HELPER and "tests" not in path.parts
        for line in _csv_writer_calls(path)
    ]
    assert offenders == [], "use portal.csv_export.csv_writer"
