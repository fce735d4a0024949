"""The contracted read functions (codespace idle auto-stop): exact figures on fixed samples."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.telemetry.models import WorkloadHourly, WorkloadSample
from scheduling.telemetry.services import last_activity, mean_gpu_utilization
from scheduling.telemetry.tests.builders import make_group, make_quota, make_workload

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


def sample(workload, minute: int, util: float | None) -> None:  # type: ignore[no-untyped-def]
    WorkloadSample.objects.create(
        ts=T0 + timedelta(minutes=minute),
        workload=workload,
        tenant_id=workload.tenant_id,
        quota_id=workload.quota_id,
        kind=workload.kind,
        allocated_milli=250,
        sm_utilization=util,
        used_milli=250 * (util or 0) / 100,
    )


@pytest.fixture
def workloads(team_a):  # type: ignore[no-untyped-def]
    quota = make_quota(make_group(), team_a)
    return [make_workload(quota, f"w{i}", kind="codespace") for i in range(3)]


def test_mean_utilization_over_samples_since_a_time_skips_missing_minutes(workloads):
    busy, idle, silent = workloads
    for minute, util in enumerate([90.0, 10.0, None, 50.0]):
        sample(busy, minute, util)
    for minute in range(3):
        sample(idle, minute, 1.0)
    result = mean_gpu_utilization([busy.pk, idle.pk, silent.pk], T0 + timedelta(minutes=1))
    assert result == {busy.pk: 30.0, idle.pk: 1.0, silent.pk: None}
    assert mean_gpu_utilization([busy.pk], T0) == {busy.pk: 50.0}


def test_last_activity_is_the_end_of_the_last_busy_minute_then_hourly_then_none(workloads):
    busy, old, never = workloads
    sample(busy, 0, 60.0)
    sample(busy, 5, 5.0)
    sample(busy, 9, 4.9)
    sample(never, 0, 0.5)
    hour = datetime(2026, 10, 30, 8, 0, tzinfo=UTC)
    for offset, idle_share in [(0, 0.5), (1, 1.0)]:
        WorkloadHourly.objects.create(
            hour=hour + timedelta(hours=offset),
            workload=old,
            tenant_id=old.tenant_id,
            quota_id=old.quota_id,
            kind=old.kind,
            minutes=60,
            allocated_milli_minutes=15000.0,
            used_milli_minutes=100.0,
            idle_milli_minutes=15000.0 * idle_share,
        )
    assert last_activity([busy.pk, old.pk, never.pk]) == {
        busy.pk: T0 + timedelta(minutes=6),
        old.pk: hour + timedelta(hours=1),
        never.pk: None,
    }
