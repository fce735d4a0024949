"""The savings read model: whole cards without slicing vs the cards slices occupy, GPU-hours freed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from codespaces.choices import (
    PLACED_STATES,
    CodespaceState,
    GpuMode,
)
from codespaces.models import (
    Codespace,
)
from scheduling.models import PlacementGpu

S = CodespaceState


# --- Savings and listings -----------------------------------------------------------------------


@dataclass(frozen=True)
class Savings:
    """Whole cards codespaces would hold without slicing vs the cards their slices actually occupy."""

    codespaces: int
    cards_without_slicing: int
    cards_occupied: int
    gpu_hours_freed_by_idle_stop: float
    per_pool: list[dict[str, Any]]

    @property
    def cards_saved(self) -> int:
        return self.cards_without_slicing - self.cards_occupied

    @property
    def percent_saved(self) -> float:
        if not self.cards_without_slicing:
            return 0.0
        return round(100 * self.cards_saved / self.cards_without_slicing, 1)


def savings(now: datetime | None = None) -> Savings:
    """Compute savings over codespaces holding a placement now; GPU-hours freed include idle-stopped
    codespaces still stopped (cards' worth × time since the stop)."""
    now = now or timezone.now()
    placed = list(
        Codespace.objects.filter(state__in=PLACED_STATES)
        .exclude(gpu_mode=GpuMode.NONE)
        .exclude(workload__isnull=True)
        .select_related("quota__group")
    )
    per_pool: dict[str, dict[str, Any]] = {}
    for codespace in placed:
        pool = per_pool.setdefault(
            codespace.quota.group.name,
            {"pool": codespace.quota.group.name, "codespaces": 0, "without": 0, "gpus": set()},
        )
        pool["codespaces"] += 1
        pool["without"] += codespace.whole_cards_without_slicing
    gpu_rows = PlacementGpu.objects.filter(
        placement__released_at__isnull=True,
        placement__workload_id__in=[c.workload_id for c in placed],
    ).values_list("placement__workload_id", "gpu_id")
    pool_of_workload = {c.workload_id: c.quota.group.name for c in placed}
    for workload_id, gpu_id in gpu_rows:
        per_pool[pool_of_workload[workload_id]]["gpus"].add(gpu_id)
    rows = [
        {
            "pool": pool["pool"],
            "codespaces": pool["codespaces"],
            "cards_without_slicing": pool["without"],
            "cards_occupied": len(pool["gpus"]),
        }
        for pool in sorted(per_pool.values(), key=lambda p: p["pool"])
    ]
    freed = 0.0
    for codespace in Codespace.objects.exclude(state=S.DELETED).only(
        "gpu_hours_freed", "idle_stopped_at", "gpu_mode", "gpu_count", "gpu_milli", "state"
    ):
        freed += codespace.gpu_hours_freed
        if codespace.idle_stopped_at is not None and codespace.state == S.STOPPED:
            hours = (now - codespace.idle_stopped_at).total_seconds() / 3600
            freed += hours * codespace.gpu_fraction
    return Savings(
        codespaces=len(placed),
        cards_without_slicing=sum(r["cards_without_slicing"] for r in rows),
        cards_occupied=sum(r["cards_occupied"] for r in rows),
        gpu_hours_freed_by_idle_stop=round(freed, 2),
        per_pool=rows,
    )
