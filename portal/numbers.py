"""Parsing numbers from user input (query strings, headers, form text) in one strict way, and the one
conversion between the exact integers the database keeps (milli, MiB) and the units people use.

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


# --------------------------------------------------------------------------- people's units
# The database and the API keep exact integers: milli-GPUs and milli-CPUs (1000 = one), MiB. People type and
# read GPUs (or % of one GPU), cores and GiB. These functions are the one place that converts between them.
MILLI_PER_UNIT = 1000
MIB_PER_GIB = 1024

# unit -> (base units per one unit, decimal places a person may type, singular, plural)
UNITS: dict[str, tuple[int, int, str, str]] = {
    "gpus": (MILLI_PER_UNIT, 3, "GPU", "GPUs"),
    "cores": (MILLI_PER_UNIT, 3, "core", "cores"),
    "gib": (MIB_PER_GIB, 3, "GiB", "GiB"),
    "percent": (10, 1, "%", "%"),  # % of one GPU: 100 % = 1000 milli
}
_DECIMAL = re.compile(r"[0-9]{1,12}(?:[.,][0-9]{0,12})?|[.,][0-9]{1,12}")


class UnitError(ValueError):
    """Text that is not an amount in the unit; the message says why, for a form error."""


def to_base(text: object, unit: str, *, minimum: float = 0, maximum: float = 10**6) -> int:
    """The exact integer (milli or MiB) for an amount a person typed in `unit`: "2.5" GPUs → 2500,
    "12" GiB → 12288, "30" % of a GPU → 300. Refuses (UnitError) text that is not a plain non-negative
    number, has more decimals than the unit allows, or lies outside [minimum, maximum] (in `unit`)."""
    per_unit, places, _singular, plural = UNITS[unit]
    stripped = str(text).strip() if text is not None else ""
    if not _DECIMAL.fullmatch(stripped):
        raise UnitError(f"Enter a number of {plural}, e.g. 2 or 0.5.")
    amount = Decimal(stripped.replace(",", "."))
    if amount != amount.quantize(Decimal(1).scaleb(-places)):
        raise UnitError(f"Use at most {places} decimal place{'s' if places > 1 else ''}.")
    if not Decimal(str(minimum)) <= amount <= Decimal(str(maximum)):
        raise UnitError(
            f"Enter between {format_number(minimum)} and {format_number(maximum)} {plural}."
        )
    return int((amount * per_unit).to_integral_value(rounding=ROUND_HALF_EVEN))


def from_base(value: int | float, unit: str) -> str:
    """The number alone in `unit`, shortest exact form up to the unit's decimals: 2500 → "2.5"."""
    per_unit, places, _singular, _plural = UNITS[unit]
    return format_number(value / per_unit, places=places)


def format_number(value: int | float | Decimal, *, places: int = 2) -> str:
    """12.50 → "12.5", 3.0 → "3", 0.0004 → "0" (at most `places` decimals, no trailing zeros)."""
    text = f"{float(value):.{places}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def human(value: int | float, unit: str) -> str:
    """A base amount with its unit for people: 2500 milli → "2.5 GPUs", 1000 → "1 GPU", 12288 MiB →
    "12 GiB", 300 milli as percent → "30 %"."""
    _per_unit, _places, singular, plural = UNITS[unit]
    number = from_base(value, unit)
    if unit == "percent":
        return f"{number} %"
    return f"{number} {singular if number == '1' else plural}"


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
