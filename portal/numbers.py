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


# --------------------------------------------------------------------------- quantities with a suffix
# Kubernetes' notation, which people who run GPU jobs already type: "500m" CPU, "32Gi" / "512Mi" memory
# (binary), "32G" (decimal: 32e9 bytes). The Kubernetes backend reads node capacity with it and the
# `tessera` CLI reads `--cpu` / `--memory`; one parser for both.
_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)")
MEMORY_EXAMPLES = "e.g. 32Gi, 512Mi, 1.5Gi or 32G"
CPU_EXAMPLES = "e.g. 8, 0.5 or 500m"


def _split_quantity(value: str) -> tuple[Decimal, str]:
    """The number and the suffix of a quantity ("1.5Gi" → (1.5, "Gi")); UnitError if it is none."""
    match = _QUANTITY.fullmatch(value.strip())
    if match is None or match.group(2) not in {**_BINARY_SUFFIXES, **_DECIMAL_SUFFIXES}:
        raise UnitError(f"not a Kubernetes quantity: {value!r}")
    return Decimal(match.group(1)), match.group(2)


def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity in base units (bytes, cores): "16Gi" → 17179869184, "500m" → 0.5,
    "80G" → 8e10, "1e3" → 1000. Raises UnitError (a ValueError) for anything else."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    number, suffix = _split_quantity(value)
    return number * _BINARY_SUFFIXES.get(suffix, _DECIMAL_SUFFIXES.get(suffix, Decimal(1)))


def memory_mib(text: str) -> int:
    """Memory a person typed with its unit, as whole MiB (rounded down): "32Gi" → 32768, "1.5Gi" →
    1536, "32G" → 30517. A bare number is refused (bytes? MiB?), as is less than 1 MiB."""
    try:
        _number, suffix = _split_quantity(text)
    except UnitError as exc:
        raise UnitError(f"{text!r} is not an amount of memory; {MEMORY_EXAMPLES}") from exc
    if suffix in ("", "m", "u", "n"):
        raise UnitError(f"{text!r} has no unit of memory; {MEMORY_EXAMPLES}")
    mib = int(parse_quantity(text) / _BINARY_SUFFIXES["Mi"])
    if mib < 1:
        raise UnitError(f"{text!r} is less than 1 MiB; {MEMORY_EXAMPLES}")
    return mib


def cpu_milli(text: str) -> int:
    """CPU a person typed as cores or millicores, as whole milli-CPU (rounded down): "8" → 8000,
    "0.5" → 500, "500m" → 500. Refuses other suffixes and less than 1m."""
    try:
        _number, suffix = _split_quantity(text)
    except UnitError as exc:
        raise UnitError(f"{text!r} is not a number of cores; {CPU_EXAMPLES}") from exc
    if suffix not in ("", "m"):
        raise UnitError(f"{text!r}: give cores or millicores, {CPU_EXAMPLES}")
    milli = int(parse_quantity(text) * MILLI_PER_UNIT)
    if milli < 1:
        raise UnitError(f"{text!r} is less than 1m of CPU; {CPU_EXAMPLES}")
    return milli
