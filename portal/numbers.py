"""Parsing numbers from user input (query strings, headers, form text) in one strict way. (Amounts in the
units people use, GPUs, cores, GiB, convert through `core.units`; `money` and `counted` put amounts
and counts into people's words.)

`str.isdigit()` accepts characters `int()` rejects (superscripts like '¹') and says nothing about size, so
a query string could crash a view or overflow a database integer. Every place that turns text into an id
or a count uses `parse_int`.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal

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


def money(amount: object, currency: str | None = None) -> str:
    """An amount for people, to the cent with the configured currency (TESSERA_CHARGEBACK_CURRENCY
    unless `currency` is given): Decimal("1") → "1.00 USD". Every page, figure and summary that shows
    a cost or a price uses it."""
    if currency is None:
        from django.conf import settings

        currency = settings.TESSERA_CHARGEBACK_CURRENCY
    cents = Decimal(str(amount)).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    return f"{cents} {currency}"


def counted(number: object, singular: str, plural: str | None = None) -> str:
    """A count of things in people's words: 1 → "1 GPU", 0.75 → "0.75 GPUs", 2 → "2 GPUs" (plural:
    `singular` + "s" unless given); None → "—". The one pluralisation of pages and messages."""
    if number is None or number == "":
        return "—"
    value = float(str(number))
    text = f"{value:g}"
    return f"{text} {singular if value == 1 else plural or singular + 's'}"
