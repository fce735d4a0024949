"""Template helpers of the quota pages."""

from __future__ import annotations

from typing import Any

from django import template

from quotas.presentation import ChangeLine, change_lines

register = template.Library()


@register.filter
def quota_change_lines(change: Any) -> list[ChangeLine]:
    """{% for line in change|quota_change_lines %} — the fields a change touched, in people's units."""
    return change_lines(change)


@register.filter
def label_selector(selector: Any) -> str:
    """{"pool": "training", "zone": "a"} → "pool=training, zone=a" ("all nodes" when empty)."""
    if not selector:
        return "all nodes"
    return ", ".join(f"{key}={value}" for key, value in sorted(dict(selector).items()))
