"""Ingestion of one minute, rollups and pruning, on the fixed cluster of `telemetry_cluster`."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.models import (
    GpuSample,
    PoolSample,
    QuotaSample,
    Resolution,
    WorkloadHourly,
    WorkloadSample,
)
from scheduling.telemetry.rollups import prune, rollup_hour
from scheduling.telemetry.samples import percentile
from scheduling.telemetry.tests.fixtures import FIXED, T0, FixedMetrics

pytestmark = pytest.mark.django_db


def test_percentile_interpolates_between_closest_ranks():
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([300.0, 60.0, 120.0], 50) == 120.0
    assert percentile([300.0, 60.0, 120.0], 95) == 282.0


def test_ingest_records_workloads_gpus_quotas_and_pool_for_the_minute(telemetry_cluster):
    w = telemetry_cluster.workloads
    report = ingest_minute(T0 + timedelta(seconds=42), FixedMetrics(FIXED))

    assert report.minute == T0
    assert (report.workloads, report.gpus, report.pools) == (4, 4, 1)
    samples = {
        s.workload.name: (s.allocated_milli, s.sm_utilization, s.used_milli)
        for s in WorkloadSample.objects.select_related("workload")
    }
    assert samples == {
        "cs-busy": (250, 80.0, 200.0),
        "cs-idle": (250, 2.0, 5.0),
        "half": (500, 50.0, 250.0),
        "train": (1000, 90.0, 900.0),
    }
    gpus = {
        (g.gpu.node.name, g.gpu.index): (g.allocated_milli, g.sm_utilization)
        for g in GpuSample.objects.select_related("gpu__node")
    }
    assert gpus == {
        ("n1", 0): (500, 20.5),
        ("n1", 1): (1000, 90.0),
        ("n2", 0): (500, 25.0),
        ("n2", 1): (0, 0.0),
    }
    quota_rows = {
        (q.tenant.slug, q.gpu_model): (
            q.allocated_milli,
            q.used_milli,
            q.idle_milli,
            q.min_milli,
            q.max_milli,
            q.borrowed_milli,
            q.pending,
        )
        for q in QuotaSample.objects.select_related("tenant")
    }
    assert quota_rows == {
        ("team-a", ""): (0.0, 0.0, 0.0, 1000.0, 2000.0, 0.0, 0.0),
        ("team-a", "A100"): (1000.0, 455.0, 250.0, 0.0, 0.0, 0.0, 0.0),
        ("team-b", ""): (0.0, 0.0, 0.0, 500.0, 3000.0, 500.0, 1.0),
        ("team-b", "A100"): (1000.0, 900.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    }
    pool = PoolSample.objects.get(resolution=Resolution.MINUTE)
    assert (pool.capacity_gpus, pool.capacity_milli) == (3.0, 3000.0)
    assert (pool.allocated_gpus, pool.allocated_milli) == (3.0, 2000.0)
    assert pool.sm_utilization == 45.167
    assert pool.pending == 1.0
    assert (pool.codespace_cards_unsliced, pool.codespace_cards_occupied) == (2.0, 1.0)
    assert (pool.wait_p50_seconds, pool.wait_p95_seconds, pool.placed_count) == (120.0, 282.0, 3)
    assert w["waiting"].pk not in set(WorkloadSample.objects.values_list("workload_id", flat=True))


def test_ingest_twice_for_a_minute_replaces_and_rollup_sums_the_minutes(telemetry_cluster):
    metrics = FixedMetrics(FIXED)
    ingest_minute(T0, metrics)
    ingest_minute(T0, metrics)
    ingest_minute(T0 + timedelta(minutes=1), FixedMetrics({**FIXED, "cs-idle": 40.0}))
    assert WorkloadSample.objects.count() == 8

    hour = T0.replace(minute=0)
    pool = PoolSample.objects.get(resolution=Resolution.HOUR, ts=hour)
    assert (pool.minutes, pool.allocated_milli, pool.capacity_milli) == (2, 4000.0, 6000.0)
    busy = WorkloadHourly.objects.get(workload__name="cs-idle", hour=hour)
    assert (busy.minutes, busy.allocated_milli_minutes, busy.used_milli_minutes) == (
        2,
        500.0,
        105.0,
    )
    assert busy.idle_milli_minutes == 250.0
    team_a = QuotaSample.objects.get(
        resolution=Resolution.HOUR, ts=hour, tenant__slug="team-a", gpu_model="A100"
    )
    assert (team_a.minutes, team_a.allocated_milli, team_a.idle_milli) == (2, 2000.0, 250.0)
    assert rollup_hour(hour) == 4 + 4 + 1


def test_prune_drops_minute_rows_after_48_hours_and_hour_rows_after_400_days(telemetry_cluster):
    ingest_minute(T0, FixedMetrics(FIXED))
    assert prune(T0 + timedelta(hours=47)).minute_rows == 0
    report = prune(T0 + timedelta(hours=49))
    assert report.minute_rows == 4 + 4 + 4 + 1
    assert report.hour_rows == 0
    assert WorkloadHourly.objects.count() == 4
    report = prune(T0 + timedelta(days=401))
    assert report.hour_rows == 4 + 4 + 1
    assert QuotaSample.objects.count() == 0


def test_a_pool_that_raises_is_left_out_and_the_others_are_recorded(telemetry_cluster, monkeypatch):
    # issue 9: one bad row must not stop a periodic task (here: the whole minute of every pool)
    from scheduling.telemetry import ingestion
    from scheduling.tests.factories import make_group, make_quota

    other = make_group("h100")
    make_quota(other, telemetry_cluster.quotas["team-a"].tenant, name="team-a-h100")
    broken = telemetry_cluster.quotas["team-a"].group
    original = ingestion.quota_figures

    def figures(group):
        if group.pk == broken.pk:
            raise ZeroDivisionError("bad snapshot")
        return original(group)

    monkeypatch.setattr(ingestion, "quota_figures", figures)
    report = ingest_minute(T0 + timedelta(seconds=42), FixedMetrics(FIXED))
    assert report.failed_groups == [broken.pk]
    assert (report.workloads, report.gpus, report.pools) == (4, 4, 2)
    figure_rows = QuotaSample.objects.filter(resolution=Resolution.MINUTE, gpu_model="")
    assert sorted(figure_rows.values_list("group__name", flat=True)) == ["h100"]
