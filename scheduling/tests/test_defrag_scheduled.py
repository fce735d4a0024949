"""Scheduled defragmentation: off by default; on, it applies a plan inside a maintenance window or when
the waiting GPU demand it unlocks reaches the threshold, leaves the pool alone otherwise, expires stale
previews, and one pool that raises does not stop the others."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from django.utils import timezone

from scheduling.choices import DefragPlanState, DefragTrigger, WorkloadState
from scheduling.models import DefragPlan, Workload
from scheduling.services import defrag as defrag_service
from scheduling.services.defrag import preview_defrag, run_scheduled_defrag
from scheduling.services.defrag_policy import DefragPolicy, parse_window
from scheduling.tasks import defrag_pools_task
from scheduling.tests.defrag_scenario import fragmented_pool
from scheduling.tests.factories import make_group

pytestmark = pytest.mark.django_db

# Tomorrow, so the fragmented pool's work (started now) has run for hours at either time; fixed dates
# broke on the day they passed (the work would have started after them).
_TOMORROW = (datetime.now(tz=UTC) + timedelta(days=1)).date()
NIGHT = datetime.combine(_TOMORROW, time(2, 30), tzinfo=UTC)
NOON = datetime.combine(_TOMORROW, time(12, 0), tzinfo=UTC)


@pytest.fixture(autouse=True)
def _open_policy(settings: Any) -> None:
    settings.TESSERA_DEFRAG_MIN_RUNTIME_SECONDS = 0
    settings.TESSERA_DEFRAG_SCHEDULED = True
    settings.TESSERA_DEFRAG_WINDOWS = ["01:00-05:00"]
    settings.TESSERA_DEFRAG_DEMAND_THRESHOLD_GPUS = 16


def waiting_state(pool: Any) -> str:
    return Workload.objects.get(pk=pool.waiting.pk).state


def test_scheduled_runs_are_off_by_default(settings: Any) -> None:
    settings.TESSERA_DEFRAG_SCHEDULED = False
    pool = fragmented_pool()
    report = run_scheduled_defrag(now=NIGHT)
    assert report.applied == {}
    assert "off" in report.skipped["*"]
    assert waiting_state(pool) == WorkloadState.PENDING
    assert not DefragPlan.objects.exists()


def test_inside_the_window_the_plan_is_applied_and_the_waiting_job_placed() -> None:
    pool = fragmented_pool()
    report = run_scheduled_defrag(now=NIGHT)
    plan = DefragPlan.objects.get()
    assert report.applied == {"training": plan.pk}
    assert (plan.state, plan.trigger) == (DefragPlanState.APPLIED, DefragTrigger.SCHEDULED)
    assert waiting_state(pool) == WorkloadState.PLACED


def test_outside_the_window_below_the_threshold_nothing_moves() -> None:
    pool = fragmented_pool()
    report = run_scheduled_defrag(now=NOON)
    assert report.applied == {}
    assert (
        "outside the maintenance window and 8 waiting GPUs unlocked (threshold 16)"
        in (report.skipped["training"])
    )
    assert DefragPlan.objects.get().state == DefragPlanState.EXPIRED
    assert waiting_state(pool) == WorkloadState.PENDING


def test_outside_the_window_enough_waiting_demand_triggers_it(settings: Any) -> None:
    settings.TESSERA_DEFRAG_DEMAND_THRESHOLD_GPUS = 8
    pool = fragmented_pool()
    report = run_scheduled_defrag(now=NOON)
    assert list(report.applied) == ["training"]
    assert waiting_state(pool) == WorkloadState.PLACED


def test_a_pool_that_raises_does_not_stop_the_others(monkeypatch: Any) -> None:
    pool = fragmented_pool()
    broken = make_group("broken", {"pool": "broken"})
    real = defrag_service.preview_defrag

    def preview(group_id: Any, **kwargs: Any) -> Any:
        if group_id == broken.pk:
            raise RuntimeError("a bad row")
        return real(group_id, **kwargs)

    monkeypatch.setattr(defrag_service, "preview_defrag", preview)
    report = run_scheduled_defrag(now=NIGHT)
    assert report.failures.failed_ids == [broken.pk]
    assert list(report.applied) == ["training"]
    assert waiting_state(pool) == WorkloadState.PLACED


def test_the_task_expires_stale_previews(settings: Any) -> None:
    settings.TESSERA_DEFRAG_SCHEDULED = False
    pool = fragmented_pool()
    plan = preview_defrag(pool.quota.group_id, now=timezone.now() - timedelta(hours=1))
    defrag_pools_task()
    assert DefragPlan.objects.get(pk=plan.pk).state == DefragPlanState.EXPIRED


@pytest.mark.parametrize(
    ("windows", "moment", "inside"),
    [
        (["01:00-05:00"], "02:30", True),
        (["01:00-05:00"], "05:00", False),
        (["22:00-02:00"], "23:15", True),
        (["22:00-02:00"], "01:59", True),
        (["22:00-02:00"], "12:00", False),
        (["01:00-02:00", "13:00-14:00"], "13:30", True),
    ],
)
def test_maintenance_windows_are_utc_and_may_span_midnight(
    windows: list[str], moment: str, inside: bool
) -> None:
    policy = replace(DefragPolicy.from_settings(), windows=tuple(map(parse_window, windows)))
    hour, minute = map(int, moment.split(":"))
    assert policy.in_window(NIGHT.replace(hour=hour, minute=minute)) is inside
