"""Parsing numbers from user input (query strings, headers, form text) in one strict way. (Amounts in the
units people use, GPUs, cores, GiB, convert through `core.units`.)

`str.isdigit()` accepts characters `int()` rejects (superscripts like '¹') and says nothing about size, so
a query string could crash a view or overflow a database integer. Every place that turns text into an id
or a count uses `parse_int`.
"""

from __future__ import annotations

import re

_INTEGER = re.compile(r"-?[0-9]{1,19}")
BIGINT_MAX = 2**63 - 1


def parse_int(text: object, *, minimum: int = -BIGINT_MAX, maximum: int = BIGINT_MAX) -> int | None:
    """The integer written in `text` (ASCII digits, optional leading '-', within [minimum, maximum],
    which defaults to the range of a 64-bit database integer), or None."""
    if not isinstance(text, str):
        return None
    stripped = text.strip()
    if not _INTEGER.fullmatch(stripped):
        return None
    value = int(stripped)
    return value if minimum <= value <= maximum else None
