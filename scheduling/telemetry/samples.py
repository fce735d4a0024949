"""The values telemetry passes between its parts: one GPU share as placed, what a metrics source measured
in a minute, the source protocol, and the wait statistics the rollups and series share.

Ingestion, the Prometheus source and the rollups all import this module and none of them imports another
for these, so they form no import circle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from scheduling.models import Gpu, Workload


@dataclass(frozen=True)
class Share:
    """One workload's share of one GPU, as placed."""

    workload_id: int
    workload_name: str
    profile: str
    gpu_id: int
    gpu_uuid: str
    gpu_milli: int
    gpu_memory_mib: int


@dataclass
class MinuteMetrics:
    """What a metrics source measured for one minute.

    `workload_utilization`: SM % of the workload's own allocation; `workload_memory_mib`: GPU memory used;
    `gpu_utilization`: SM % of the whole card; `gpu_memory_mib`: framebuffer used. Missing keys = no metric.
    `workload_attribution`: how each workload's figure was found (`models.Attribution` values).
    """

    workload_utilization: dict[int, float] = field(default_factory=dict)
    workload_memory_mib: dict[int, int] = field(default_factory=dict)
    gpu_utilization: dict[int, float] = field(default_factory=dict)
    gpu_memory_mib: dict[int, int] = field(default_factory=dict)
    workload_attribution: dict[int, str] = field(default_factory=dict)


class MetricsSource(Protocol):
    @property
    def source(self) -> str: ...

    def measure(
        self, minute: datetime, shares: Sequence[Share], gpus: Sequence[Gpu]
    ) -> MinuteMetrics:
        """Utilization and memory of the given shares and GPUs in `minute`."""
        ...


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0–100) by linear interpolation between closest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def wait_seconds(group_quota_ids: Iterable[int], start: datetime, end: datetime) -> list[float]:
    """Submit → placed waits (seconds) of the GPU workloads of these quotas placed in [start, end)."""
    rows = Workload.objects.filter(
        quota_id__in=list(group_quota_ids),
        placed_at__gte=start,
        placed_at__lt=end,
        gpu_count__gt=0,
    ).values_list("submitted_at", "placed_at")
    return [
        max((placed - submitted).total_seconds(), 0.0)
        for submitted, placed in rows
        if placed is not None
    ]
