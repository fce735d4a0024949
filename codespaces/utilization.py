"""The per-codespace GPU utilization series behind the sparklines (read from telemetry samples)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from codespaces.models import Codespace
from scheduling.telemetry.models import WorkloadSample
from scheduling.telemetry.services import GpuUse, gpu_use_by_workload


def utilization_series(workload_ids: Iterable[int], since: datetime) -> dict[int, dict[str, Any]]:
    """Per workload: {"ts": [iso minute...], "values": [SM % of its allocation or None...]}, oldest
    first, from the minute samples taken at or after `since`."""
    ids = sorted(set(workload_ids))
    series: dict[int, dict[str, Any]] = {i: {"ts": [], "values": []} for i in ids}
    rows = (
        WorkloadSample.objects.filter(workload_id__in=ids, ts__gte=since)
        .order_by("workload_id", "ts")
        .values_list("workload_id", "ts", "sm_utilization")
    )
    for workload_id, ts, value in rows:
        series[workload_id]["ts"].append(ts.isoformat())
        series[workload_id]["values"].append(value)
    return series


def codespace_gpu_use(codespace: Codespace, *, hours: int = 1) -> GpuUse | None:
    """What the codespace's current workload used of its GPU share over the last `hours`, labelled
    with how it was found (None: no workload or no metric)."""
    if not codespace.workload_id:
        return None
    since = timezone.now() - timedelta(hours=hours)
    return gpu_use_by_workload([codespace.workload_id], since).get(codespace.workload_id)
