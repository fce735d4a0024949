"""Kubernetes resource quantities: `500m`, `16Gi`, `80G`, `1e3` (parsed by `portal.numbers.parse_quantity`,
the one parser the CLI shares) and MiB values formatted back."""

from __future__ import annotations

from portal.numbers import parse_quantity

__all__ = ["bytes_to_mib", "cpu_milli", "format_mib", "parse_quantity"]

_MIB = 2**20


def cpu_milli(value: str | int | float) -> int:
    """CPU quantity → millicores (`"4"` → 4000, `"3500m"` → 3500)."""
    return int(parse_quantity(value) * 1000)


def bytes_to_mib(value: str | int | float) -> int:
    """Memory quantity → whole MiB, rounded down."""
    return int(parse_quantity(value) / _MIB)


def format_mib(mib: int) -> str:
    """MiB as the shortest exact binary quantity: 12288 → `12Gi`, 1536 → `1536Mi`."""
    if mib > 0 and mib % 1024 == 0:
        return f"{mib // 1024}Gi"
    return f"{mib}Mi"
