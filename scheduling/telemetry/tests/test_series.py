"""Dashboard series on fixed data: exact figures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.errors import InvalidInput
from quotas.usage import group_snapshot
from scheduling.telemetry import series
from scheduling.telemetry.fragmentation import PRESETS, fragmentation_map, preset
from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.models import QuotaSample, Resolution
from scheduling.telemetry.tests.fixtures import FIXED, T0, FixedMetrics

pytestmark = pytest.mark.django_db


def test_window_reads_minutes_up_to_48_hours_and_hours_beyond():
    assert series.window("6h", T0) == series.Window(
        T0 - timedelta(hours=6) + timedelta(minutes=1), T0 + timedelta(minutes=1), "minute"
    )
    hourly = series.window("7d", T0 + timedelta(minutes=5))
    assert (hourly.end, hourly.resolution) == (datetime(2026, 11, 2, 11, 0, tzinfo=UTC), "hour")
    with pytest.raises(InvalidInput) as excinfo:
        series.window("1y", T0)
    assert excinfo.value.fields == {"range": ["choose one of 6h, 24h, 48h, 7d, 30d, 90d"]}


def test_pool_series_and_cluster_summary(telemetry_cluster):
    ingest_minute(T0, FixedMetrics(FIXED))
    win = series.window("6h", T0)
    points = series.pool_series(win)
    assert points == {
        "a100": [
            series.PoolPoint(
                ts=T0,
                allocation_cards_percent=100.0,
                allocation_milli_percent=66.67,
                utilization_percent=45.17,
                allocated_gpus=3.0,
                capacity_gpus=3.0,
                pending=1.0,
                wait_p50_seconds=120.0,
                wait_p95_seconds=282.0,
            )
        ]
    }
    assert series.cluster_summary(win) == series.ClusterSummary(
        allocation_cards_percent=100.0,
        allocation_milli_percent=66.67,
        utilization_percent=45.17,
        pending_now=1.0,
        wait_p50_seconds=120.0,
        wait_p95_seconds=282.0,
    )


def test_tenant_usage_minute_and_hour_resolution(telemetry_cluster, team_a):
    ingest_minute(T0, FixedMetrics(FIXED))
    ingest_minute(T0 + timedelta(minutes=1), FixedMetrics({**FIXED, "cs-busy": 3.0}))
    runtime = (
        group_snapshot(telemetry_cluster.group)
        .quota(telemetry_cluster.quotas["team-a"].pk)
        .gpu.runtime.gpu_milli
        / 1000
    )

    usage = series.tenant_usage(team_a, series.window("6h", T0 + timedelta(minutes=1)))
    assert usage.points == [
        series.TenantPoint(T0, 1.0, 0.455, 0.25, 1.0, 2.0, runtime, 0.0, 0.0),
        series.TenantPoint(T0 + timedelta(minutes=1), 1.0, 0.263, 0.5, 1.0, 2.0, runtime, 0.0, 0.0),
    ]
    assert usage.points[0].utilization_percent == 45.5
    # 2 minutes × 1000 milli = 2000 milli-minutes = 0.033 GPU-hours
    assert (usage.allocated_gpu_hours, usage.used_gpu_hours, usage.idle_gpu_hours) == (
        0.033,
        0.012,
        0.013,
    )
    assert [(w.name, w.idle_gpu_hours, w.allocated_gpu_hours) for w in usage.wasting] == [
        ("cs-idle", 0.008, 0.008),
        ("cs-busy", 0.004, 0.008),
    ]

    hourly = series.tenant_usage(team_a, series.window("7d", T0 + timedelta(minutes=1)))
    assert hourly.points == [
        series.TenantPoint(T0.replace(minute=0), 1.0, 0.359, 0.375, 1.0, 2.0, runtime, 0.0, 0.0)
    ]
    assert [(w.name, w.idle_gpu_hours) for w in hourly.wasting] == [
        ("cs-idle", 0.008),
        ("cs-busy", 0.004),
    ]


def test_savings_series(telemetry_cluster):
    ingest_minute(T0, FixedMetrics(FIXED))
    points = series.savings_series(series.window("6h", T0))
    assert points == [series.SavingsPoint(T0, 2.0, 1.0)]
    assert points[0].cards_saved == 1.0


def test_gpu_hour_prices_parse_and_reject():
    assert series.gpu_hour_prices("H100=4.0, a100=2.5,default=1") == {
        "h100": Decimal("4.0"),
        "a100": Decimal("2.5"),
        "default": Decimal("1"),
    }
    assert series.price_for("L4", series.gpu_hour_prices("H100=4")) == Decimal(0)
    for bad in ("H100", "H100=abc", "=3", "A100=-1"):
        with pytest.raises(ImproperlyConfigured):
            series.gpu_hour_prices(bad)


def test_chargeback_per_month_tenant_and_model(telemetry_cluster, team_a, team_b, settings):
    settings.TESSERA_GPU_HOUR_PRICES = "H100=4.0,A100=2.5,default=1.0"
    qa, qb = telemetry_cluster.quotas["team-a"], telemetry_cluster.quotas["team-b"]
    october = datetime(2026, 10, 31, 23, 0, tzinfo=UTC)
    november = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)
    rows = [
        (qa, "A100", november, 10, 4),
        (qa, "A100", november + timedelta(hours=1), 2, 1),
        (qb, "H100", october, 5, 5),
        (qb, "L4", november, 1, 0),
    ]
    for quota, model, hour, allocated_h, used_h in rows:
        QuotaSample.objects.create(
            resolution=Resolution.HOUR,
            ts=hour,
            minutes=60,
            group=quota.group,
            quota=quota,
            tenant=quota.tenant,
            gpu_model=model,
            allocated_milli=allocated_h * 60000,
            used_milli=used_h * 60000,
        )
    result = series.chargeback(2, T0)
    assert [
        (r.month, r.tenant_slug, r.gpu_model, r.allocated_gpu_hours, r.used_gpu_hours, r.cost)
        for r in result
    ] == [
        ("2026-10", "team-b", "H100", 5.0, 5.0, Decimal("20.00")),
        ("2026-11", "team-a", "A100", 12.0, 5.0, Decimal("30.00")),
        ("2026-11", "team-b", "L4", 1.0, 0.0, Decimal("1.00")),
    ]
    assert [r.month for r in series.chargeback(1, T0)] == ["2026-11", "2026-11"]
    assert [r.tenant_slug for r in series.chargeback(3, T0, [team_a])] == ["team-a"]
    with pytest.raises(InvalidInput):
        series.chargeback(0, T0)


def test_fragmentation_map_free_capacity_fits_and_fgd(telemetry_cluster):
    fmap = fragmentation_map(telemetry_cluster.group, preset("quarter"))
    assert fmap.nodes == ["n1", "n2"]
    assert fmap.free_milli == [[500, 0], [500, None]]
    assert fmap.free_memory_mib == [[40960, 0], [40960, None]]
    assert fmap.fits == {"n1": 2, "n2": 2}
    assert fmap.free_milli_total == 1000
    # request mix: 40 % whole GPUs, 40 % quarters, 20 % halves; a whole GPU fits on neither node
    assert fmap.fragmented_milli == 400.0
    assert fmap.fragmentation_percent == 40.0
    assert fragmentation_map(telemetry_cluster.group, preset("whole")).fits == {}
    custom = preset(None, 300, 30000)
    assert (custom.gpu_milli, custom.gpu_memory_mib) == (300, 30000)
    assert fragmentation_map(telemetry_cluster.group, custom).fits == {"n1": 1, "n2": 1}
    assert [p.key for p in PRESETS][0] == "quarter"
    with pytest.raises(InvalidInput):
        preset(None, 1001)
    with pytest.raises(InvalidInput):
        preset("huge")


def test_system_check_rejects_malformed_prices(settings):
    from scheduling.telemetry.checks import check_gpu_hour_prices

    settings.TESSERA_GPU_HOUR_PRICES = "H100=4.0,A100=2.5"
    assert check_gpu_hour_prices() == []
    settings.TESSERA_GPU_HOUR_PRICES = "H100:4"
    [error] = check_gpu_hour_prices()
    assert error.id == "telemetry.E001"
    assert "'H100:4' is not MODEL=PRICE" in error.msg


def test_cluster_summary_weights_hour_rows_by_capacity(telemetry_cluster):
    # given two hour rows of one pool: 60 minutes at 3 cards and 50 % SM, 30 minutes at 3 cards and 20 %
    from scheduling.telemetry.models import PoolSample

    hour = datetime(2026, 11, 1, 0, 0, tzinfo=UTC)
    for offset, minutes, sm in ((0, 60, 50.0), (1, 30, 20.0)):
        PoolSample.objects.create(
            resolution=Resolution.HOUR,
            ts=hour + timedelta(hours=offset),
            minutes=minutes,
            group=telemetry_cluster.group,
            capacity_gpus=3 * minutes,
            capacity_milli=3000 * minutes,
            allocated_gpus=minutes,
            allocated_milli=1500 * minutes,
            sm_utilization=sm * minutes,
        )
    summary = series.cluster_summary(series.window("7d", hour + timedelta(hours=2)))
    # minutes weigh: (50 × 180 + 20 × 90) / 270 = 40 %
    assert summary.utilization_percent == 40.0
    assert summary.allocation_milli_percent == 50.0
    assert summary.allocation_cards_percent == 33.33


def test_ranges_beyond_six_hours_chart_five_minute_periods(telemetry_cluster, team_a):
    ingest_minute(T0, FixedMetrics(FIXED))
    ingest_minute(T0 + timedelta(minutes=1), FixedMetrics({**FIXED, "train": 10.0}))
    ingest_minute(T0 + timedelta(minutes=5), FixedMetrics(FIXED))
    win = series.window("24h", T0 + timedelta(minutes=5))
    assert (win.bucket_minutes, series.window("6h", T0).bucket_minutes) == (5, 1)
    [pool] = series.pool_series(win).values()
    # 10:30 holds 10:30 and 10:31 (GPU n1/1 at 90 % then 10 %): mean SM (45.167 + 18.5) / 2
    assert [(p.ts.minute, p.utilization_percent, p.allocation_milli_percent) for p in pool] == [
        (30, 31.83, 66.67),
        (35, 45.17, 66.67),
    ]
    usage = series.tenant_usage(team_a, win)
    assert [(p.ts.minute, p.allocated, p.idle) for p in usage.points] == [
        (30, 1.0, 0.25),
        (35, 1.0, 0.25),
    ]
    assert [(p.ts.minute, p.cards_unsliced) for p in series.savings_series(win)] == [
        (30, 2.0),
        (35, 2.0),
    ]
