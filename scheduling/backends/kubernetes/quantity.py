"""Kubernetes resource quantities: `500m`, `16Gi`, `80G`, `1e3` (parsed by `core.units.parse_quantity`,
the one parser the CLI shares) and MiB values formatted back."""

from __future__ import annotations

from core.units import MIB_PER_GIB, MILLI_PER_CORE, parse_quantity

__all__ = ["bytes_to_mib", "cpu_milli", "format_mib", "parse_quantity"]

_MIB = 2**20


def cpu_milli(value: str | int | float) -> int:
    """CPU quantity → millicores (`"4"` → 4000, `"3500m"` → 3500)."""
    return int(parse_quantity(value) * MILLI_PER_CORE)


def bytes_to_mib(value: str | int | float) -> int:
    """Memory quantity → whole MiB, rounded down."""
    return int(parse_quantity(value) / _MIB)


def format_mib(mib: int) -> str:
    """MiB as the shortest exact binary quantity: 12288 → `12Gi`, 1536 → `1536Mi`."""
    if mib > 0 and mib % MIB_PER_GIB == 0:
        return f"{mib // MIB_PER_GIB}Gi"
    return f"{mib}Mi"
