"""Read side of telemetry: what codespaces, dashboards and the API ask of the samples.

Contracted (docs/services.md): `mean_gpu_utilization` and `last_activity`, used by codespace idle
auto-stop. `gpu_use_by_workload` / `gpu_use_by_tenant`: what a workload or a team used of its
allocation, labelled with how it was found (measured per container, the device's own figure, or
apportioned by allocation). Dashboard series live in `scheduling.telemetry.series`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Avg, F, Max

from scheduling.telemetry.models import Attribution, WorkloadHourly, WorkloadSample
from scheduling.telemetry.synthetic import IDLE_THRESHOLD_PERCENT


def mean_gpu_utilization(workload_ids: Iterable[int], since: datetime) -> dict[int, float | None]:
    """Mean SM utilization (percent of each workload's own allocation) over the minute samples taken at
    or after `since`, per workload id; None for a workload with no sample in that window (not started,
    CPU-only, or no metric arrived). Minutes without a metric are left out of the mean."""
    ids = sorted(set(workload_ids))
    result: dict[int, float | None] = dict.fromkeys(ids)
    rows = (
        WorkloadSample.objects.filter(
            workload_id__in=ids, ts__gte=since, sm_utilization__isnull=False
        )
        .values("workload_id")
        .annotate(mean=Avg("sm_utilization"))
    )
    for row in rows:
        result[row["workload_id"]] = round(float(row["mean"]), 3)
    return result


def last_activity(workload_ids: Iterable[int]) -> dict[int, datetime | None]:
    """When each workload last used its GPU: the end of the latest minute whose SM utilization reached
    the idle threshold (5 %), from the minute samples (48 h); older than that, the end of the latest hour
    with any non-idle minute. None when it was never seen active."""
    ids = sorted(set(workload_ids))
    result: dict[int, datetime | None] = dict.fromkeys(ids)
    rows = (
        WorkloadSample.objects.filter(
            workload_id__in=ids, sm_utilization__gte=IDLE_THRESHOLD_PERCENT
        )
        .values("workload_id")
        .annotate(last=Max("ts"))
    )
    for row in rows:
        result[row["workload_id"]] = row["last"] + timedelta(minutes=1)
    missing = [i for i, value in result.items() if value is None]
    if missing:
        hourly = (
            WorkloadHourly.objects.filter(workload_id__in=missing)
            .filter(idle_milli_minutes__lt=F("allocated_milli_minutes"))
            .values("workload_id")
            .annotate(last=Max("hour"))
        )
        for row in hourly:
            result[row["workload_id"]] = row["last"] + timedelta(hours=1)
    return result


@dataclass(frozen=True)
class GpuUse:
    """What a workload (or a team) used of its GPU allocation over a window, and how it was found.

    `used_milli` / `allocated_milli` are means over the minutes with a metric (1000 = one card);
    `percent` = used / allocated. `attribution` is an `Attribution` value, "mixed" when the minutes
    disagree; `apportioned_minutes` counts the minutes whose figure was an allocation split."""

    allocated_milli: float
    used_milli: float
    minutes: int
    attribution: str
    apportioned_minutes: int

    @property
    def percent(self) -> float | None:
        if not self.allocated_milli:
            return None
        return round(100 * self.used_milli / self.allocated_milli, 1)

    @property
    def apportioned(self) -> bool:
        return self.apportioned_minutes > 0

    @property
    def label(self) -> str:
        if self.attribution == "mixed":
            return (
                f"partly apportioned ({self.apportioned_minutes} of {self.minutes} minutes split "
                "by allocation, the rest measured)"
            )
        return str(Attribution(self.attribution).label) if self.attribution else "no metric"


def _gpu_use(rows: Iterable[tuple[int, float, str]]) -> GpuUse:
    allocated = used = 0.0
    minutes = apportioned = 0
    ways: set[str] = set()
    for milli, used_milli, attribution in rows:
        allocated += milli
        used += used_milli
        minutes += 1
        ways.add(attribution)
        apportioned += attribution == Attribution.APPORTIONED
    attribution = ways.pop() if len(ways) == 1 else ("mixed" if ways else "")
    if minutes == 0:
        return GpuUse(0.0, 0.0, 0, "", 0)
    return GpuUse(
        round(allocated / minutes, 3), round(used / minutes, 3), minutes, attribution, apportioned
    )


def gpu_use_by_workload(workload_ids: Iterable[int], since: datetime) -> dict[int, GpuUse]:
    """Each workload's own use of its GPUs since `since` (minute samples with a metric), labelled
    with how it was found; workloads without a sample are left out."""
    grouped: dict[int, list[tuple[int, float, str]]] = defaultdict(list)
    for workload_id, milli, used, attribution in (
        WorkloadSample.objects.filter(
            workload_id__in=sorted(set(workload_ids)), ts__gte=since, sm_utilization__isnull=False
        )
        .order_by("workload_id", "ts")
        .values_list("workload_id", "allocated_milli", "used_milli", "attribution")
    ):
        grouped[workload_id].append((milli, used, attribution))
    return {workload_id: _gpu_use(rows) for workload_id, rows in grouped.items()}


def gpu_use_by_tenant(tenant_ids: Iterable[int], since: datetime) -> dict[int, GpuUse]:
    """Per team: the sum over its workloads of each minute's allocation and use (then the mean per
    minute with samples), labelled apportioned when any of its minutes was."""
    per_minute: dict[int, dict[datetime, list[float]]] = defaultdict(dict)
    ways: dict[int, dict[datetime, set[str]]] = defaultdict(dict)
    for tenant_id, ts, milli, used, attribution in (
        WorkloadSample.objects.filter(
            tenant_id__in=sorted(set(tenant_ids)), ts__gte=since, sm_utilization__isnull=False
        )
        .order_by("tenant_id", "ts")
        .values_list("tenant_id", "ts", "allocated_milli", "used_milli", "attribution")
    ):
        acc = per_minute[tenant_id].setdefault(ts, [0.0, 0.0])
        acc[0] += milli
        acc[1] += used
        ways[tenant_id].setdefault(ts, set()).add(attribution)
    out = {}
    for tenant_id, minutes in per_minute.items():
        rows = []
        for ts, (held, used_sum) in minutes.items():
            seen = ways[tenant_id][ts]
            label = Attribution.APPORTIONED if Attribution.APPORTIONED in seen else min(seen)
            rows.append((int(held), used_sum, str(label)))
        out[tenant_id] = _gpu_use(rows)
    return out
