"""Synthetic history (demo and bench data) and its management command."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from scheduling.telemetry import series
from scheduling.telemetry.backfill import BackfillRefused, _held, backfill
from scheduling.telemetry.models import PoolSample, QuotaSample, Resolution, WorkloadHourly
from scheduling.telemetry.tests.fixtures import T0

pytestmark = pytest.mark.django_db


def test_backfill_writes_hours_then_minutes_and_refuses_to_overwrite(telemetry_cluster, team_a):
    report = backfill(2, raw_hours=1, now=T0)
    # 2 days of hours up to 09:00, then minutes 09:00 → 10:30 ingested and rolled up
    assert (report.hours, report.minutes) == (48, 91)
    assert report.pool_rows == 48
    assert report.quota_rows >= 48 * 2
    pools = PoolSample.objects.filter(resolution=Resolution.HOUR).order_by("ts")
    assert pools.count() == 48 + 2
    assert {p.capacity_milli / p.minutes for p in pools} == {3000.0}
    train = WorkloadHourly.objects.filter(workload__name="train", minutes=60)
    assert {w.allocated_milli_minutes for w in train} == {60000.0}
    # the same history again is refused, unless replaced
    with pytest.raises(BackfillRefused):
        backfill(2, raw_hours=1, now=T0)
    again = backfill(2, raw_hours=1, now=T0, replace=True)
    assert again.workload_hour_rows == report.workload_hour_rows
    usage = series.tenant_usage(team_a, series.window("7d", T0))
    assert len(usage.points) == 50
    assert usage.points[0].min == 1.0
    assert usage.points[0].max == 2.0
    # per minute: 2 figures rows + 2 (quota, model) rows; in 09:00 the training job follows the
    # hours' schedule (so minutes and hours agree): its (quota, model) row only when its 6-hour block
    # is on. The block is drawn from the workload's id, which differs between databases and orders.
    train = telemetry_cluster.workloads["train"]
    rows_0900 = 4 if _held(train.pk, train.profile, T0.replace(hour=9, minute=0)) else 3
    assert (
        QuotaSample.objects.filter(resolution=Resolution.MINUTE).count() == 60 * rows_0900 + 31 * 4
    )


def test_backfill_command_checks_its_arguments(telemetry_cluster, capsys):
    with pytest.raises(CommandError, match="--days=0"):
        call_command("backfill_telemetry", "--days", "0")
    with pytest.raises(CommandError, match="--raw-hours=48"):
        call_command("backfill_telemetry", "--raw-hours", "48")
    call_command("backfill_telemetry", "--days", "1", "--raw-hours", "0")
    assert "telemetry backfill: 24 hours" in capsys.readouterr().out
    with pytest.raises(CommandError, match="pass --replace"):
        call_command("backfill_telemetry", "--days", "1", "--raw-hours", "0")
    assert WorkloadHourly.objects.filter(hour__lt=T0.replace(hour=0) + timedelta(days=40)).exists()
