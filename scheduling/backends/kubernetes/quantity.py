"""Kubernetes resource quantities: parse `500m`, `16Gi`, `80G`, `1e3` and format MiB values."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from core.units import MIB_PER_GIB, MILLI_PER_CORE

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
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


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity into a Decimal of base units. Raises ValueError."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = value.strip()
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            return _number(text[: -len(suffix)], value) * factor
    suffix = text[-1:] if text[-1:] in _DECIMAL and not text[-1:].isdigit() else ""
    number = text[: -len(suffix)] if suffix else text
    return _number(number, value) * _DECIMAL[suffix]


def _number(text: str, original: object) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation as exc:
        raise ValueError(f"not a Kubernetes quantity: {original!r}") from exc


def cpu_milli(value: str | int | float) -> int:
    """CPU quantity → millicores (`"4"` → 4000, `"3500m"` → 3500)."""
    return int(parse_quantity(value) * MILLI_PER_CORE)


def bytes_to_mib(value: str | int | float) -> int:
    """Memory quantity → whole MiB, rounded down."""
    return int(parse_quantity(value) / _BINARY["Mi"])


def format_mib(mib: int) -> str:
    """MiB as the shortest exact binary quantity: 12288 → `12Gi`, 1536 → `1536Mi`."""
    if mib > 0 and mib % MIB_PER_GIB == 0:
        return f"{mib // MIB_PER_GIB}Gi"
    return f"{mib}Mi"
