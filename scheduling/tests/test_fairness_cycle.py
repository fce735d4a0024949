"""Fairness over time through a real scheduling cycle (database, simulated backend): recorded usage
(telemetry hour rows) → decayed fair share / budget state → the cycle's decision and waiting reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from quotas.models import GpuHourBudget
from quotas.tests.factories import record_gpu_hours, two_teams_and_a_lender
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from scheduling.services.cycle import run_cycle
from scheduling.tests.factories import make_group, make_quota, small_cluster
from scheduling.tests.factories import submit_whole_gpu_jobs as submit

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # Wednesday noon


def states(workloads: list[Workload]) -> list[str]:
    return [Workload.objects.get(pk=w.pk).state for w in workloads]


def active(workloads: list[Workload]) -> int:
    return sum(s in (WorkloadState.PLACED, WorkloadState.RUNNING) for s in states(workloads))


@time_machine.travel(NOW, tick=False)
def test_the_team_that_used_three_times_its_share_last_week_borrows_only_after_the_other() -> None:
    small_cluster(gpu_nodes=2, gpus_per_node=4)  # 8 A100
    teams = two_teams_and_a_lender(half_life=168)
    a, b = teams.a, teams.b
    # team-a held 400 GPU-hours one half-life (a week) ago: 200 decayed; the group's total is 200,
    # the fair share of each of the three equal weights 66.7, so team-a is at 300 %.
    record_gpu_hours(a, NOW - timedelta(hours=168, minutes=30), 400.0)
    first_a = submit(a, 8, "a")  # team-a asked first
    first_b = submit(b, 8, "b")
    run_cycle(a.group_id)
    assert (active(first_a), active(first_b)) == (0, 8)
    waiting = Workload.objects.get(pk=first_a[0].pk)
    assert waiting.pending_code == "quota_runtime"
    assert waiting.queue_position == 1


@time_machine.travel(NOW, tick=False)
def test_with_fair_share_off_the_same_history_changes_nothing() -> None:
    small_cluster(gpu_nodes=2, gpus_per_node=4)  # 8 A100
    teams = two_teams_and_a_lender(half_life=None)
    a, b = teams.a, teams.b
    record_gpu_hours(a, NOW - timedelta(hours=168, minutes=30), 400.0)
    first_a, first_b = submit(a, 8, "a"), submit(b, 8, "b")
    run_cycle(a.group_id)
    assert (active(first_a), active(first_b)) == (4, 4)


@time_machine.travel(NOW, tick=False)
def test_a_budget_exhausted_mid_week_stops_borrowing_with_the_reason_and_numbers() -> None:
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    group = make_group()
    a = make_quota(group, name="team-a", gpu_min_milli=2000)
    GpuHourBudget.objects.create(quota=a, period="week", limit_gpu_hours=100)
    # Monday and Tuesday: 2 x 24 h on 2.5 GPUs = 120 GPU-hours of a 100 GPU-hour weekly budget
    monday = datetime(2026, 11, 30, tzinfo=UTC)
    for hour in range(48):
        record_gpu_hours(a, monday + timedelta(hours=hour), 2.5)
    record_gpu_hours(
        a, monday - timedelta(hours=1), 50.0
    )  # Sunday: last week's period, not counted
    wanted = submit(a, 4, "a")
    run_cycle(group.pk)
    assert states(wanted).count(WorkloadState.PENDING) == 2  # the 2 within min started
    waiting = list(Workload.objects.filter(pk__in=[w.pk for w in wanted], state="pending"))
    assert {w.pending_code for w in waiting} == {"budget_exhausted"}
    assert waiting[0].pending_reason == (
        "team-a GPU side: GPU-hour budget exhausted (120.0 of 100.0 GPU-hours used this week (since "
        "Mon 30 Nov 00:00 UTC), 120 %); new borrowing beyond min 2 GPUs stops until the period "
        "resets or an operator tops it up (work within min still starts)."
    )


def test_a_loan_moves_min_for_its_window_and_at_its_end_the_lender_reclaims() -> None:
    from portal.tests.factories import MembershipFactory, UserFactory
    from quotas import loans

    small_cluster(gpu_nodes=2, gpus_per_node=4)  # 8 A100
    group = make_group()
    lab = make_quota(
        group, name="lab", gpu_min_milli=8000, gpu_max_milli=8000,
        gpu_min_gpu_memory_mib=8 * 40960,
    )  # fmt: skip
    team = make_quota(group, name="team-a", gpu_max_milli=4000)
    lea = UserFactory(username="lea")
    MembershipFactory(user=lea, tenant=lab.tenant, role="tenant_admin")
    with time_machine.travel(NOW, tick=False):
        loan = loans.request_loan(
            borrower=team, lender=lab, gpus=4, starts_at=NOW, ends_at=NOW + timedelta(days=1),
            actor=_operator(),
        )  # fmt: skip
        loans.decide_loan(loan, approve=True, actor=lea)
        borrowed = submit(team, 4, "team")
        run_cycle(group.pk)
        assert active(borrowed) == 4
        own = submit(lab, 8, "lab")
        run_cycle(group.pk)
        # within the window the lab's min is 4: it gets 4 and cannot take back the loaned 4
        assert (active(own), active(borrowed)) == (4, 4)
        assert Workload.objects.get(pk=own[4].pk).pending_code != "reclaiming"
    with time_machine.travel(NOW + timedelta(days=1, seconds=1), tick=False):
        run_cycle(group.pk)  # the window ended: min 8 is back with the lab, it reclaims
        assert active(borrowed) == 3  # one claim per cycle: one GPU taken back for the first unit
        assert Workload.objects.get(pk=borrowed[0].pk).pending_code == "reclaimed"
        for _ in range(4):
            run_cycle(group.pk)
        assert (active(own), active(borrowed)) == (8, 0)


def _operator() -> Any:
    from portal.tests.factories import UserFactory

    return UserFactory(username="operator", is_staff=True, is_superuser=True)


def test_the_fair_share_reading_is_reused_while_the_shard_version_is_unchanged() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduling.services.quota_bridge import cycle_snapshot

    a = two_teams_and_a_lender(half_life=168).a
    record_gpu_hours(a, NOW - timedelta(hours=168, minutes=30), 400.0)
    group = a.group
    with time_machine.travel(NOW, tick=False):
        with CaptureQueriesContext(connection) as first:
            cold = cycle_snapshot(group, 1)
        with CaptureQueriesContext(connection) as second:
            warm = cycle_snapshot(group, 1)
        with CaptureQueriesContext(connection) as third:
            moved = cycle_snapshot(group, 2)  # the shard moved on: read again
    with time_machine.travel(NOW + timedelta(seconds=61), tick=False):
        with CaptureQueriesContext(connection) as aged:
            cycle_snapshot(group, 2)  # same version, but older than a minute: read again
    # (the first also fills the worker's capacity cache)
    assert len(second) < len(third) == len(aged) < len(first)
    fair = cold.quota(a.pk).spec.fair_share
    assert fair is not None
    assert warm.quota(a.pk).spec.fair_share == fair == moved.quota(a.pk).spec.fair_share
    assert fair.percent == 300
