"""The docs name only code that exists: every dotted name of ours (`scheduling.services.run_cycle`) imports
and resolves, and every source file path (`quotas/usage.py`) exists. A rename that forgets the docs fails
here instead of sending a newcomer to a function that is gone."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PACKAGES = ("core", "portal", "quotas", "scheduling", "codespaces", "dashboards")

# `pkg.module.attr`, not part of a longer dotted word or a path (`internal.scheduling.koordinator.sh/x`)
NAMES = "|".join(PACKAGES)
DOTTED = re.compile(rf"(?<![\w./-])((?:{NAMES})(?:\.[A-Za-z_]\w*)+)(?![/\w-])(?!\.[\w/-])")
SOURCE_PATH = re.compile(rf"(?<![\w./-])((?:{NAMES}|bench)/[\w/]+\.py)\b")


def resolve(name: str) -> Any:
    """The object `name` names: the longest importable module prefix, then attributes. Raises
    LookupError naming what is missing."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            found: ModuleType | Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module_name.startswith(exc.name):
                raise  # the module exists but one of its imports is missing
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                raise LookupError(f"{module_name} has no {'.'.join(parts[cut:])}")
            found = getattr(found, attribute)
        return found
    raise LookupError(f"no module {parts[0]}")


def named_in(path: Path, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    return [
        (number, match.group(1))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in pattern.finditer(line)
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_dotted_name_in_the_docs_exists(doc: Path) -> None:
    missing = []
    for number, name in named_in(doc, DOTTED):
        try:
            resolve(name)
        except LookupError as exc:
            missing.append(f"{doc.relative_to(ROOT)}:{number}: {name} ({exc})")
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_source_file_in_the_docs_exists(doc: Path) -> None:
    missing = [
        f"{doc.relative_to(ROOT)}:{number}: {path}"
        for number, path in named_in(doc, SOURCE_PATH)
        if not (ROOT / path).exists()
    ]
    assert missing == []


def test_the_name_check_tells_a_missing_function_from_a_real_one(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text(
        "`codespaces.services.create_codespace` then `codespaces.lifecycle.create`;\n"
        "annotation `internal.scheduling.koordinator.sh/hint` and `scheduling.koordinator.sh/x`.\n"
    )
    names = [name for _, name in named_in(doc, DOTTED)]
    assert names == ["codespaces.services.create_codespace", "codespaces.lifecycle.create"]
    assert callable(resolve(names[0]))
    with pytest.raises(LookupError, match="codespaces.lifecycle has no create"):
        resolve(names[1])


MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|Users|root|home/(?!tessera\b)[\w.-]+)/")


def test_no_doc_or_docstring_names_a_path_of_one_machine() -> None:
    sources = [*DOCS, *(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sources
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert found == []


def test_the_machine_path_check_allows_the_pod_home() -> None:
    assert MACHINE_PATH.search("see /work/shared/docs/x.md")
    assert MACHINE_PATH.search("/home/alice/tessera/quotas")
    assert not MACHINE_PATH.search("mounted at `/home/tessera` in the pod")
    assert not MACHINE_PATH.search("`../shared/docs/k8s-integration.md`")
