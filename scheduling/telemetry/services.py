"""Read side of telemetry: what codespaces, dashboards and the API ask of the samples.

Contracted (docs/services.md): `mean_gpu_utilization` and `last_activity`, used by codespace idle
auto-stop. Dashboard series live in `scheduling.telemetry.series`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import Avg, F, Max

from scheduling.telemetry.models import WorkloadHourly, WorkloadSample
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
