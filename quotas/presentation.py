"""Words and bar geometry for people: headroom sentences and the used / min / max / runtime bars.

Pure functions of a snapshot; the pages and the API use the same sentences.
"""

from __future__ import annotations

from dataclasses import dataclass

from quotas.resources import Side, human_amount, human_number
from quotas.usage import QuotaUsage, SideUsage


def _side_sentence(usage: SideUsage, side: Side, *, now: str) -> str | None:
    dimension = "gpu_milli" if side is Side.GPU else "cpu_milli"
    if usage.max.get(dimension) == 0:
        return None
    more = usage.headroom.get(dimension)
    sure = usage.guaranteed_headroom.get(dimension)
    unit = human_amount(dimension, more).split(" ", 1)[1]
    if side is Side.CPU:
        unit += " of CPU-only work"
    if more == 0:
        return f"no more {unit}{now} (the runtime share is in use)"
    text = f"{human_number(dimension, more)} more {unit}{now}"
    if sure == more:
        return f"{text}, all of them guaranteed"
    if sure:
        return f"{text}, {human_number(dimension, sure)} of them guaranteed"
    return f"{text}, borrowed from idle capacity (none guaranteed)"


def headroom_sentence(usage: QuotaUsage) -> str:
    """ "You can start 2.5 more GPUs now, 1 of them guaranteed; and 8 more CPUs of CPU-only work, ..."."""
    gpu = _side_sentence(usage.gpu, Side.GPU, now=" now")
    cpu = _side_sentence(usage.cpu, Side.CPU, now="" if gpu else " now")
    parts = [p for p in (gpu, cpu) if p]
    if not parts:
        return "This quota allows nothing yet (every max is 0)."
    return "You can start " + "; and ".join(parts) + "."


@dataclass(frozen=True)
class Bar:
    """Percentages (0–100) of one leaf's bar on one side, scaled to the side's capacity or max."""

    dimension: str
    scale: int
    used_within_min: float
    borrowed: float
    pending: float
    min: float
    runtime: float
    max: float
    label_used: str
    label_min: str
    label_max: str
    label_runtime: str
    label_borrowed: str
    label_pending: str


def _pct(value: int, scale: int) -> float:
    if scale <= 0:
        return 0.0
    return round(min(100.0, max(0.0, 100.0 * value / scale)), 2)


def bar(usage: SideUsage, side: Side, capacity: int) -> Bar:
    """The bar of one side: used (within min, then borrowed), pending, and markers for min/runtime/max."""
    dimension = "gpu_milli" if side is Side.GPU else "cpu_milli"
    scale = max(capacity, usage.max.get(dimension), usage.used.get(dimension), 1)
    used = usage.used.get(dimension)
    borrowed = usage.borrowed.get(dimension)
    return Bar(
        dimension=dimension,
        scale=scale,
        used_within_min=_pct(used - borrowed, scale),
        borrowed=_pct(borrowed, scale),
        pending=_pct(usage.pending.get(dimension), scale),
        min=_pct(usage.min.get(dimension), scale),
        runtime=_pct(usage.runtime.get(dimension), scale),
        max=_pct(usage.max.get(dimension), scale),
        label_used=human_amount(dimension, used),
        label_min=human_amount(dimension, usage.min.get(dimension)),
        label_max=human_amount(dimension, usage.max.get(dimension)),
        label_runtime=human_amount(dimension, usage.runtime.get(dimension)),
        label_borrowed=human_amount(dimension, borrowed),
        label_pending=human_amount(dimension, usage.pending.get(dimension)),
    )


SIDE_LABELS = {"gpu": "GPU side", "cpu": "CPU side"}
DIMENSION_LABELS = {
    "gpu_milli": "GPU",
    "gpu_memory_mib": "GPU memory",
    "cpu_milli": "CPU",
    "memory_mib": "memory",
}
OTHER_LABELS = {
    "shared_weight": "Shared weight",
    "lend_idle_min": "Lend idle min",
    "name": "Name",
    "tenant": "Tenant",
    "description": "Description",
    "node_selector": "Node selector",
    "allow_overcommitted_min": "Allow overcommitted mins",
}


def field_label(name: str) -> str:
    """ "gpu_max_gpu_milli" → "GPU side max GPU"; other fields by their label."""
    side, _, rest = name.partition("_")
    bound, _, dimension = rest.partition("_")
    if side in SIDE_LABELS and bound in ("min", "max") and dimension in DIMENSION_LABELS:
        return f"{SIDE_LABELS[side]} {bound} {DIMENSION_LABELS[dimension]}"
    return OTHER_LABELS.get(name, name)


def field_value(name: str, value: object) -> str:
    """A stored value as people read it: 4000 (gpu_milli) → "4 GPUs", None weight → "max (default)"."""
    if value is None:
        return "max (default)" if name == "shared_weight" else "—"
    dimension = name.split("_", 2)[-1] if name.startswith(("gpu_", "cpu_")) else ""
    if dimension in DIMENSION_LABELS and isinstance(value, int):
        return human_amount(dimension, value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


@dataclass(frozen=True)
class ChangeLine:
    field: str
    label: str
    before: str
    after: str


def change_lines(change: object) -> list[ChangeLine]:
    """The fields a QuotaChange touched (all initial values for a creation), in people's units."""
    before = getattr(change, "before", None) or {}
    after = getattr(change, "after", None) or {}
    keys = list(dict.fromkeys([*before.keys(), *after.keys()]))
    return [
        ChangeLine(
            field=key,
            label=field_label(key),
            before=field_value(key, before.get(key)) if key in before else "—",
            after=field_value(key, after.get(key)) if key in after else "—",
        )
        for key in keys
        if before.get(key) != after.get(key) or not before or not after
    ]
