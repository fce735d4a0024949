"""Hourly rollups and retention: minute rows are summed into hour rows; old rows are pruned.

Retention: minute rows (WorkloadSample, GpuSample, minute QuotaSample/PoolSample) 48 hours; hour rows
(WorkloadHourly, hour QuotaSample/PoolSample) 400 days.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from quotas.models import Quota
from scheduling.telemetry.models import (
    GpuSample,
    PoolSample,
    QuotaSample,
    Resolution,
    WorkloadHourly,
    WorkloadSample,
)
from scheduling.telemetry.sample_rows import (
    POOL_SUMS,
    QUOTA_SUMS,
    PoolWaits,
    QuotaIds,
    Window,
    pool_row,
    quota_sum_row,
)
from scheduling.telemetry.samples import wait_seconds
from scheduling.telemetry.synthetic import IDLE_THRESHOLD_PERCENT

RAW_RETENTION = timedelta(hours=48)
HOURLY_RETENTION = timedelta(days=400)


@transaction.atomic
def rollup_hour(hour: datetime) -> int:
    """(Re)build the hour rows for the hour starting at `hour` from its minute rows; idempotent.

    Returns the number of hour rows written."""
    end = hour + timedelta(hours=1)
    written = 0

    WorkloadHourly.objects.filter(hour=hour).delete()
    idle = Q(sm_utilization__isnull=True) | Q(sm_utilization__lt=IDLE_THRESHOLD_PERCENT)
    workload_rows = (
        WorkloadSample.objects.filter(ts__gte=hour, ts__lt=end)
        .values("workload_id", "tenant_id", "quota_id", "kind")
        .annotate(
            minutes=Count("id"),
            allocated=Sum("allocated_milli"),
            used=Sum("used_milli"),
            idle=Sum("allocated_milli", filter=idle),
        )
    )
    hourly = [
        WorkloadHourly(
            hour=hour,
            workload_id=r["workload_id"],
            tenant_id=r["tenant_id"],
            quota_id=r["quota_id"],
            kind=r["kind"],
            minutes=r["minutes"],
            allocated_milli_minutes=float(r["allocated"] or 0),
            used_milli_minutes=float(r["used"] or 0),
            idle_milli_minutes=float(r["idle"] or 0),
        )
        for r in workload_rows
    ]
    WorkloadHourly.objects.bulk_create(hourly)
    written += len(hourly)

    QuotaSample.objects.filter(resolution=Resolution.HOUR, ts=hour).delete()
    quota_rows = (
        QuotaSample.objects.filter(resolution=Resolution.MINUTE, ts__gte=hour, ts__lt=end)
        .values("group_id", "quota_id", "tenant_id", "gpu_model")
        .annotate(minutes_sum=Sum("minutes"), **{f"s_{f}": Sum(f) for f in QUOTA_SUMS})
    )
    quota_hourly = [
        quota_sum_row(
            Window.hour(hour, r["minutes_sum"]),
            QuotaIds(r["group_id"], r["quota_id"], r["tenant_id"]),
            r["gpu_model"],
            {f: float(r[f"s_{f}"] or 0) for f in QUOTA_SUMS},
        )
        for r in quota_rows
    ]
    QuotaSample.objects.bulk_create(quota_hourly)
    written += len(quota_hourly)

    PoolSample.objects.filter(resolution=Resolution.HOUR, ts=hour).delete()
    pool_rows = (
        PoolSample.objects.filter(resolution=Resolution.MINUTE, ts__gte=hour, ts__lt=end)
        .values("group_id")
        .annotate(minutes_sum=Sum("minutes"), **{f"s_{f}": Sum(f) for f in POOL_SUMS})
    )
    pool_hourly = []
    for r in pool_rows:
        quota_ids = Quota.objects.filter(group_id=r["group_id"]).values_list("pk", flat=True)
        waits = wait_seconds(quota_ids, hour, end)
        pool_hourly.append(
            pool_row(
                Window.hour(hour, r["minutes_sum"]),
                r["group_id"],
                {f: float(r[f"s_{f}"] or 0) for f in POOL_SUMS},
                PoolWaits.of(waits),
            )
        )
    PoolSample.objects.bulk_create(pool_hourly)
    written += len(pool_hourly)
    return written


@dataclass
class PruneReport:
    """Rows deleted by one pruning pass."""

    minute_rows: int
    hour_rows: int


def prune(now: datetime | None = None) -> PruneReport:
    """Delete minute rows older than 48 h and hour rows older than 400 days."""
    now = now or timezone.now()
    raw_cutoff = now - RAW_RETENTION
    hour_cutoff = now - HOURLY_RETENTION
    minute_rows = 0
    minute_rows += WorkloadSample.objects.filter(ts__lt=raw_cutoff).delete()[0]
    minute_rows += GpuSample.objects.filter(ts__lt=raw_cutoff).delete()[0]
    minute_rows += QuotaSample.objects.filter(
        resolution=Resolution.MINUTE, ts__lt=raw_cutoff
    ).delete()[0]
    minute_rows += PoolSample.objects.filter(
        resolution=Resolution.MINUTE, ts__lt=raw_cutoff
    ).delete()[0]
    hour_rows = 0
    hour_rows += WorkloadHourly.objects.filter(hour__lt=hour_cutoff).delete()[0]
    hour_rows += QuotaSample.objects.filter(
        resolution=Resolution.HOUR, ts__lt=hour_cutoff
    ).delete()[0]
    hour_rows += PoolSample.objects.filter(resolution=Resolution.HOUR, ts__lt=hour_cutoff).delete()[
        0
    ]
    return PruneReport(minute_rows=minute_rows, hour_rows=hour_rows)
