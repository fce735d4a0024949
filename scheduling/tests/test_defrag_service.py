"""Defragmentation plans as data: preview stores the moves and changes nothing; apply moves the workloads
through the requeue path and places the waiting request on the capacity freed for it, once; the policy
decides what may move."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from portal.errors import Conflict
from scheduling import services
from scheduling.choices import DefragPlanState, WorkloadState
from scheduling.models import DefragMove, DefragPlan, Placement, Workload
from scheduling.services.defrag import apply_defrag, preview_defrag
from scheduling.tests.defrag_scenario import Fragmented, fragmented_pool, keep_both_in_place

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("open_policy"),
]


@pytest.fixture
def open_policy(settings):  # type: ignore[no-untyped-def]
    settings.TESSERA_DEFRAG_MIN_RUNTIME_SECONDS = 0
    settings.TESSERA_DEFRAG_MAX_MOVES_PER_TEAM_PER_DAY = 5


def node_of(w: Workload) -> str | None:
    p = (
        Placement.objects.filter(workload=w, released_at__isnull=True)
        .select_related("node")
        .first()
    )
    return None if p is None else p.node.name


def test_the_blocked_8_gpu_job_waits_for_capacity_in_the_fragmented_pool() -> None:
    pool = fragmented_pool()
    assert node_of(pool.first) == "training-g0"
    assert node_of(pool.second) == "training-g1"
    assert pool.waiting.state == WorkloadState.PENDING
    assert pool.waiting.pending_code == "insufficient_gpu"


def test_preview_plans_one_move_that_frees_a_node_for_the_waiting_job_and_changes_nothing() -> None:
    pool = fragmented_pool()
    plan = preview_defrag(pool.quota.group_id)
    assert plan.state == DefragPlanState.PREVIEWED
    moves = list(plan.moves.all())
    assert len(moves) == 1
    move = moves[0]
    assert move.workload_id in (pool.first.pk, pool.second.pk)
    assert move.from_node != move.to_node
    assert plan.unlocks == [
        {
            "workload": pool.waiting.pk,
            "name": f"job {pool.quota.tenant.slug}/big",
            "shape": "8-GPU",
            "node": move.from_node,
            "gpus": list(range(8)),
        }
    ]
    assert move.reason.startswith(f"Moved to free 1 H100 GPU on {move.from_node} for a waiting ")
    assert "8-GPU job" in move.reason
    assert f"job {pool.quota.tenant.slug}/big" in plan.value
    # nothing moved
    assert node_of(pool.first) == "training-g0"
    assert Workload.objects.get(pk=pool.waiting.pk).state == WorkloadState.PENDING


def applied(pool: Fragmented) -> tuple[DefragPlan, DefragMove]:
    plan = preview_defrag(pool.quota.group_id)
    move = plan.moves.get()
    return apply_defrag(plan.pk), move


def test_apply_moves_the_workload_and_places_the_waiting_job_on_the_freed_node() -> None:
    pool = fragmented_pool()
    plan, move = applied(pool)
    assert plan.state == DefragPlanState.APPLIED, plan.error
    moved = Workload.objects.get(pk=move.workload_id)
    assert moved.state == WorkloadState.PLACED
    assert node_of(moved) == move.to_node
    big = Workload.objects.get(pk=pool.waiting.pk)
    assert big.state == WorkloadState.PLACED
    assert node_of(big) == move.from_node
    assert plan.result["moved"] == [move.workload_id]
    assert plan.result["started"] == [pool.waiting.pk]
    # the move went through the requeue path: its old placement is closed, a new one is open
    assert Placement.objects.filter(workload=moved).count() == 2
    assert DefragMove.objects.get(pk=move.pk).moved_at is not None


def test_a_retried_apply_returns_the_original_answer_and_moves_nothing_again() -> None:
    pool = fragmented_pool()
    plan, move = applied(pool)
    again = apply_defrag(plan.pk)
    assert again.state == DefragPlanState.APPLIED
    assert again.result == plan.result
    assert Placement.objects.filter(workload_id=move.workload_id).count() == 2


def test_apply_fails_without_partial_state_when_a_moved_workload_changed_since_the_preview() -> (
    None
):
    pool = fragmented_pool()
    plan = preview_defrag(pool.quota.group_id)
    move = plan.moves.get()
    services.release_workload(move.workload_id, reason="finished meanwhile")
    result = apply_defrag(plan.pk)
    assert result.state == DefragPlanState.FAILED
    assert "moved or stopped since the preview" in result.error
    assert Workload.objects.get(pk=pool.waiting.pk).state == WorkloadState.PENDING
    assert DefragMove.objects.get(pk=move.pk).moved_at is None


def test_an_expired_plan_is_refused_and_marked_expired() -> None:
    pool = fragmented_pool()
    plan = preview_defrag(pool.quota.group_id)
    with pytest.raises(Conflict, match="expired"):
        apply_defrag(plan.pk, now=timezone.now() + timedelta(hours=2))
    assert DefragPlan.objects.get(pk=plan.pk).state == DefragPlanState.EXPIRED
    assert node_of(pool.first) == "training-g0"


def test_non_preemptible_and_exempt_work_is_never_moved() -> None:
    pool = fragmented_pool()
    keep_both_in_place(pool)
    plan = preview_defrag(pool.quota.group_id)
    assert plan.moves.count() == 0
    assert plan.unlocks == []


def test_work_younger_than_the_minimum_runtime_stays() -> None:
    pool = fragmented_pool()
    with override_settings(TESSERA_DEFRAG_MIN_RUNTIME_SECONDS=3600):
        plan = preview_defrag(pool.quota.group_id)
    assert plan.moves.count() == 0


def test_a_team_that_used_its_daily_budget_is_not_moved_until_the_day_is_over() -> None:
    pool = fragmented_pool()
    earlier = preview_defrag(pool.quota.group_id)
    # one move of this team was made two hours ago (the earlier plan's, recorded as done)
    earlier.moves.update(moved_at=timezone.now() - timedelta(hours=2))
    with override_settings(TESSERA_DEFRAG_MAX_MOVES_PER_TEAM_PER_DAY=1):
        assert preview_defrag(pool.quota.group_id).moves.count() == 0
    with override_settings(TESSERA_DEFRAG_MAX_MOVES_PER_TEAM_PER_DAY=2):
        assert preview_defrag(pool.quota.group_id).moves.count() == 1
    earlier.moves.update(moved_at=timezone.now() - timedelta(hours=25))
    with override_settings(TESSERA_DEFRAG_MAX_MOVES_PER_TEAM_PER_DAY=1):
        assert preview_defrag(pool.quota.group_id).moves.count() == 1


def test_an_exempt_team_is_never_moved() -> None:
    pool = fragmented_pool()
    with override_settings(TESSERA_DEFRAG_EXEMPT_TENANTS=[pool.quota.tenant.slug]):
        plan = preview_defrag(pool.quota.group_id)
    assert plan.moves.count() == 0
    with override_settings(
        TESSERA_DEFRAG_EXEMPT_QUOTAS=[f"{pool.quota.tenant.slug}/{pool.quota.name}"]
    ):
        plan = preview_defrag(pool.quota.group_id)
    assert plan.moves.count() == 0
    assert preview_defrag(pool.quota.group_id).moves.count() == 1


def test_a_plan_that_moves_nothing_says_what_it_looked_at_and_why_each_workload_stays() -> None:
    pool = fragmented_pool()
    keep_both_in_place(pool)
    plan = preview_defrag(pool.quota.group_id)
    assert plan.moves.count() == 0
    considered = plan.considered
    assert (considered["waiting"], considered["running"], considered["movable"]) == (1, 2, 0)
    assert considered["summary"] == (
        "Looked at 1 waiting request and 2 running workloads; none may move."
    )
    assert considered["kept"] == [
        {"reason": "it is exempt from defragmentation", "count": 1},
        {"reason": "it is not preemptible", "count": 1},
    ]


def test_a_plan_counts_what_the_planner_refused_in_words() -> None:
    pool = fragmented_pool()
    # a job's restart (600 s) costs more than any move may
    with override_settings(TESSERA_DEFRAG_MAX_COST_SECONDS_PER_MOVE=0):
        plan = preview_defrag(pool.quota.group_id)
    considered = plan.considered
    assert considered["summary"] == (
        "Looked at 1 waiting request and 2 running workloads; 2 may move."
    )
    assert considered["kept"] == []
    reasons = {p["reason"]: p["count"] for p in considered["planner"]}
    assert reasons
    assert all(isinstance(n, int) and n > 0 for n in reasons.values())
    assert any("limits" in reason for reason in reasons)


def test_a_plan_that_moves_says_how_many_it_could_have_moved() -> None:
    pool = fragmented_pool()
    plan = preview_defrag(pool.quota.group_id)
    assert plan.moves.count() == 1
    assert plan.considered["summary"] == (
        "Looked at 1 waiting request and 2 running workloads; 2 may move."
    )
