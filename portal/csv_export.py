"""The one way Tessera writes CSV for people to open: every cell is neutralised against formula
injection (OWASP "CSV Injection"), so a value a member typed (a GPU model, a codespace name) cannot run
as a formula in the spreadsheet of the operator who opens the export.

A text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is prefixed with a
single quote, which spreadsheets show as text. A plain number (``-1.5``, ``+3``) is left as it is: it is
not a formula, and the export stays readable by programs. Every CSV export uses :func:`csv_writer`
(``portal/tests/test_csv_export.py`` checks that no other module calls ``csv.writer``)."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import Any, Protocol

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


class _Writable(Protocol):
    def write(self, s: str, /) -> Any: ...


def neutralise_cell(value: Any) -> Any:
    """`value` safe to open in a spreadsheet: text starting like a formula gets a leading quote;
    numbers, None and other text are returned unchanged."""
    if not isinstance(value, str) or not value.startswith(FORMULA_PREFIXES):
        return value
    if _PLAIN_NUMBER.fullmatch(value):
        return value
    return "'" + value


class SafeCsvWriter:
    """`csv.writer` whose rows are neutralised cell by cell (:func:`neutralise_cell`)."""

    def __init__(self, out: _Writable) -> None:
        self._writer = csv.writer(out)

    def writerow(self, row: Iterable[Any]) -> None:
        self._writer.writerow([neutralise_cell(v) for v in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def csv_writer(out: _Writable) -> SafeCsvWriter:
    """The writer every CSV export uses (a text buffer or an HttpResponse)."""
    return SafeCsvWriter(out)
