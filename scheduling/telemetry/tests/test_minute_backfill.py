"""Issue 16: the demo shows a full 24 hours of minutes. The bulk minute backfill builds each minute with
the ingestion's own row builder (same rows as `ingest_minute` for the current minute), writes a whole day,
and each hour's rollup is the sum of its minutes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Count, Sum

from scheduling.telemetry.backfill import backfill_minutes
from scheduling.telemetry.ingestion import SyntheticMetrics, ingest_minute
from scheduling.telemetry.models import (
    GpuSample,
    PoolSample,
    QuotaSample,
    Resolution,
    WorkloadHourly,
    WorkloadSample,
)
from scheduling.telemetry.tests.fixtures import T0

pytestmark = pytest.mark.django_db


def _minute_rows(minute: Any) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "workloads": sorted(
            WorkloadSample.objects.filter(ts=minute).values_list(
                "workload_id", "allocated_milli", "sm_utilization", "used_milli", "memory_used_mib"
            )
        ),
        "gpus": sorted(
            GpuSample.objects.filter(ts=minute).values_list(
                "gpu_id", "sm_utilization", "memory_used_mib", "allocated_milli"
            )
        ),
        "quotas": sorted(
            QuotaSample.objects.filter(resolution=Resolution.MINUTE, ts=minute).values_list(
                "quota_id",
                "gpu_model",
                "allocated_milli",
                "used_milli",
                "idle_milli",
                "min_milli",
                "max_milli",
                "runtime_milli",
                "pending",
            )  # fmt: skip
        ),
        "pools": sorted(
            PoolSample.objects.filter(resolution=Resolution.MINUTE, ts=minute).values_list(
                "group_id",
                "capacity_gpus",
                "allocated_gpus",
                "allocated_milli",
                "sm_utilization",
                "pending",
                "wait_p50_seconds",
                "wait_p95_seconds",
                "placed_count",
            )  # fmt: skip
        ),
    }


def test_bulk_minute_is_the_minute_ingestion_writes(telemetry_cluster: Any) -> None:
    minute = T0.replace(second=0, microsecond=0)
    ingest_minute(minute, SyntheticMetrics())
    ingested = _minute_rows(minute)
    report = backfill_minutes(minute, minute)
    assert (report.minutes, report.hours) == (1, 1)
    assert _minute_rows(minute) == ingested
    # 4 workloads hold a GPU (cs-busy, cs-idle, half, train), 4 GPUs, 1 pool
    assert (report.workload_rows, report.gpu_rows, report.pool_rows) == (4, 4, 1)


def test_a_day_of_minutes_every_hour_rolled_up_from_its_minutes(telemetry_cluster: Any) -> None:
    start = T0 - timedelta(hours=24)
    report = backfill_minutes(start, T0)
    # 10:30 yesterday through 10:30 today, both included; hours 10:00 yesterday → 10:00 today
    assert (report.minutes, report.hours) == (24 * 60 + 1, 25)
    assert report.gpu_rows == 4 * (24 * 60 + 1)
    pools = PoolSample.objects.filter(resolution=Resolution.MINUTE)
    assert pools.values("ts").distinct().count() == 24 * 60 + 1
    assert pools.order_by("ts").first().ts == start  # type: ignore[union-attr]
    # every hour's rollup is the sum of its minutes (same samples, two resolutions). Whether a past
    # hour holds any workload depends on the workloads' pks (`_held`'s draws), which depend on the
    # tests run before this one: an hour nobody held sums to nothing on both sides.
    for hour in (T0.replace(minute=0) - timedelta(hours=h) for h in (0, 5, 23)):
        end = hour + timedelta(hours=1)
        minutes = WorkloadSample.objects.filter(ts__gte=hour, ts__lt=end).aggregate(
            n=Count("pk"), milli=Sum("allocated_milli")
        )
        hourly = WorkloadHourly.objects.filter(hour=hour).aggregate(
            n=Sum("minutes"), milli=Sum("allocated_milli_minutes")
        )
        assert (hourly["n"] or 0, hourly["milli"] or 0.0) == (
            minutes["n"],
            float(minutes["milli"] or 0),
        )
    # the current hour counts every workload placed now (older hours follow each profile's
    # schedule): 4 workloads in each of its 31 minutes
    current = WorkloadSample.objects.filter(ts__gte=T0.replace(minute=0)).count()
    assert current == 4 * 31
    # running it again replaces the rows, never doubles them
    again = backfill_minutes(start, T0)
    assert WorkloadSample.objects.count() == again.workload_rows == report.workload_rows
