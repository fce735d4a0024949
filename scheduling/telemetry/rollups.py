"""Hourly rollups and retention: minute rows are summed into hour rows; old rows are pruned.

Retention: minute rows (WorkloadSample, GpuSample, minute QuotaSample/PoolSample) 48 hours; hour rows
(WorkloadHourly, hour QuotaSample/PoolSample) 400 days.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from portal.periodic import ItemFailures, run_each, run_in_chunks
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
def rollup_hour(hour: datetime, failures: ItemFailures | None = None) -> int:
    """(Re)build the hour rows for the hour starting at `hour` from its minute rows; idempotent.

    The rows are written set-based in chunks; a row the database refuses is left out, logged and
    counted in `failures` and the others are written (portal.periodic.run_in_chunks), as is a pool
    whose figures raise. Returns the number of hour rows written."""
    end = hour + timedelta(hours=1)
    written = 0
    failures = failures if failures is not None else ItemFailures()

    def insert(rows: Sequence[Any], kind: str, key: Callable[[Any], Any]) -> int:
        inserted: list[int] = []
        run_in_chunks(
            rows,
            lambda chunk: inserted.append(len(type(chunk[0]).objects.bulk_create(chunk))),
            task=f"rollup {hour.isoformat()}",
            kind=kind,
            key=key,
            failures=failures,
        )
        return sum(inserted)

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
    written += insert(hourly, "workload hour row", lambda row: row.workload_id)

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
    written += insert(quota_hourly, "quota hour row", lambda row: (row.quota_id, row.gpu_model))

    PoolSample.objects.filter(resolution=Resolution.HOUR, ts=hour).delete()
    pool_rows = (
        PoolSample.objects.filter(resolution=Resolution.MINUTE, ts__gte=hour, ts__lt=end)
        .values("group_id")
        .annotate(minutes_sum=Sum("minutes"), **{f"s_{f}": Sum(f) for f in POOL_SUMS})
    )
    pool_hourly: list[PoolSample] = []

    def add_pool(r: dict[str, Any]) -> None:
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

    run_each(
        list(pool_rows),
        add_pool,
        task=f"rollup {hour.isoformat()}",
        kind="pool",
        key=lambda r: r["group_id"],
        failures=failures,
    )
    written += insert(pool_hourly, "pool hour row", lambda row: row.group_id)
    return written


@dataclass
class PruneReport:
    """Rows deleted by one pruning pass, and the rows a delete refused (`failures`: by table and pk)."""

    minute_rows: int
    hour_rows: int
    failures: ItemFailures = field(default_factory=ItemFailures)


def _delete_old(queryset: QuerySet[Any], failures: ItemFailures) -> int:
    """Delete `queryset`'s rows in one statement; when the database refuses it (one row a trigger,
    a constraint or a lock refuses), delete them in chunks of pks instead, the refused rows left in
    place, logged and counted (portal.periodic.run_in_chunks). Returns the rows deleted."""
    try:
        with transaction.atomic():
            return int(queryset.delete()[0])
    except DatabaseError:
        pass
    model = queryset.model
    deleted: list[int] = []
    run_in_chunks(
        list(queryset.order_by("pk").values_list("pk", flat=True)),
        lambda pks: deleted.append(int(model.objects.filter(pk__in=pks).delete()[0])),
        task="telemetry prune",
        kind=model._meta.db_table,
        failures=failures,
    )
    return sum(deleted)


def prune(now: datetime | None = None) -> PruneReport:
    """Delete minute rows older than 48 h and hour rows older than 400 days, one statement per table;
    a table whose delete fails is deleted in chunks, so only the rows refused stay (`failures`)."""
    now = now or timezone.now()
    raw_cutoff = now - RAW_RETENTION
    hour_cutoff = now - HOURLY_RETENTION
    failures = ItemFailures()
    minute_tables: list[QuerySet[Any]] = [
        WorkloadSample.objects.filter(ts__lt=raw_cutoff),
        GpuSample.objects.filter(ts__lt=raw_cutoff),
        QuotaSample.objects.filter(resolution=Resolution.MINUTE, ts__lt=raw_cutoff),
        PoolSample.objects.filter(resolution=Resolution.MINUTE, ts__lt=raw_cutoff),
    ]
    hour_tables: list[QuerySet[Any]] = [
        WorkloadHourly.objects.filter(hour__lt=hour_cutoff),
        QuotaSample.objects.filter(resolution=Resolution.HOUR, ts__lt=hour_cutoff),
        PoolSample.objects.filter(resolution=Resolution.HOUR, ts__lt=hour_cutoff),
    ]
    minute_rows = sum(_delete_old(qs, failures) for qs in minute_tables)
    hour_rows = sum(_delete_old(qs, failures) for qs in hour_tables)
    return PruneReport(minute_rows=minute_rows, hour_rows=hour_rows, failures=failures)
