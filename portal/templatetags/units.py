"""{% load units %}: the exact integers models keep (milli, MiB) shown in people's units, through
core.units (one conversion for forms, pages and dashboards).

    {{ node.cpu_milli|cores }} → "64 cores"     {{ gpu.memory_mib|gib }} → "80 GiB"
    {{ share.gpu_milli|gpus }} → "0.3 GPUs"     {{ share.gpu_milli|gpu_share }} → "30 %"
"""

from __future__ import annotations

from typing import Any

from django import template

from core import units
from portal import numbers

register = template.Library()


def _amount(value: Any, unit: str) -> str:
    if value is None or value == "":
        return "—"
    return units.human(value, unit)


@register.filter
def gpus(milli: Any) -> str:
    """2500 → "2.5 GPUs"."""
    return _amount(milli, "gpus")


@register.filter
def gpu_share(milli: Any) -> str:
    """A share of one GPU's compute: 300 → "30 %"."""
    return _amount(milli, "percent")


@register.filter
def cores(milli: Any) -> str:
    """CPU: 4000 → "4 cores"."""
    return _amount(milli, "cores")


@register.filter
def gib(mib: Any) -> str:
    """Memory: 16384 → "16 GiB"."""
    return _amount(mib, "gib")


@register.filter
def money(amount: Any) -> str:
    """Decimal("1") → "1.00 USD" (the configured currency)."""
    if amount is None or amount == "":
        return "—"
    return numbers.money(amount)


@register.filter
def counted(number: Any, singular: str) -> str:
    """{{ 1|counted:"GPU" }} → "1 GPU", {{ 2|counted:"GPU" }} → "2 GPUs" (portal.numbers.counted)."""
    return numbers.counted(number, singular)
