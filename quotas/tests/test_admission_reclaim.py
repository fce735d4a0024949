"""Admission (quotas.admission) and reclaim planning (quotas.reclaim) on real workload rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from quotas.admission import check_admission
from quotas.reclaim import plan_reclaim
from quotas.resources import Resources
from quotas.tests.factories import (
    QuotaFactory,
    QuotaGroupFactory,
    make_gang,
    make_node,
    make_workload,
)
from quotas.usage import group_snapshot

pytestmark = pytest.mark.django_db

BIG = {"gpu_max_gpu_memory_mib": 10**7, "gpu_max_cpu_milli": 10**6, "gpu_max_memory_mib": 10**8}


@pytest.fixture
def pool(team_a, team_b):
    """8 GPUs; team-a: min 4, max 4 GPUs; team-b: min 2, max 8."""
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=4)
    make_node("g2", pool="training", gpu_count=4)
    qa = QuotaFactory(
        group=group, tenant=team_a, gpu_min_gpu_milli=4000, gpu_max_gpu_milli=4000, **BIG
    )
    qb = QuotaFactory(
        group=group, tenant=team_b, gpu_min_gpu_milli=2000, gpu_max_gpu_milli=8000, **BIG
    )
    return group, qa, qb


def test_admission_refuses_over_max_with_the_numbers(pool):
    _, qa, _ = pool
    make_workload(qa, gpu_count=7, gpu_milli=500)  # 3.5 GPUs
    request = make_workload(qa, state="pending", gpu_count=1)
    result = check_admission(request)
    assert (result.allowed, result.code) == (False, "quota_max")
    assert result.reason == "team-a GPU side: 3.5 of max 4 GPUs in use, request 1."


def test_admission_allows_within_min_and_says_so(pool):
    _, qa, _ = pool
    make_workload(qa, gpu_count=1)
    request = make_workload(qa, state="pending", gpu_count=2)
    result = check_admission(request)
    assert (result.allowed, result.code, result.within_min) == (True, "admitted", True)
    assert (
        result.reason
        == "team-a GPU side: 1 in use + request 2 of runtime share 3 GPUs (within min 4 GPUs)."
    )


def test_admission_counts_an_unsaved_request_in_the_demand(pool):
    from scheduling.models import Workload

    _, _, qb = pool
    unsaved = Workload(
        tenant=qb.tenant,
        quota=qb,
        kind="job_pod",
        name="x",
        cpu_milli=1000,
        memory_mib=1024,
        gpu_count=6,
        gpu_milli=1000,
    )
    result = check_admission(unsaved)
    # team-a is idle and lends its min: team-b may borrow up to its max
    assert (result.allowed, result.within_min) == (True, False)
    assert "borrowing 4 GPUs beyond min 2" in result.reason


def test_admission_refuses_beyond_runtime_when_siblings_claim_their_min(pool):
    _, qa, qb = pool
    make_workload(qa, state="pending", gpu_count=4)  # team-a wants its whole min
    make_workload(qb, gpu_count=3)
    request = make_workload(qb, state="pending", gpu_count=2)
    result = check_admission(request)
    assert (result.allowed, result.code) == (False, "quota_runtime")
    assert result.reason.startswith(
        "team-b GPU side: 3 in use + request 2 is more than its runtime share of 4 GPUs"
    )


def test_non_preemptible_work_is_admitted_only_within_min(pool):
    _, _, qb = pool
    make_workload(qb, gpu_count=2, preemptible=False)
    request = make_workload(qb, state="pending", gpu_count=1, preemptible=False)
    result = check_admission(request)
    assert (result.allowed, result.code) == (False, "nonpreemptible_beyond_min")
    assert "2 of min 2 GPUs held by non-preemptible work, request 1" in result.reason
    # the same request, preemptible, may borrow
    request.preemptible = True
    assert check_admission(request).allowed is True


def test_gang_members_are_admitted_together(pool):
    _, qa, _ = pool
    gang = make_gang(qa, "g", min_available=3)
    members = [make_workload(qa, state="pending", gpu_count=2, gang=gang) for _ in range(3)]
    result = check_admission(members)
    assert (result.allowed, result.code) == (False, "quota_max")
    assert result.reason == "team-a GPU side: 0 of max 4 GPUs in use, request 6."


# ------------------------------------------------------------------------------------------ reclaim


def test_a_borrowing_gang_of_four_is_reclaimed_whole(pool):
    # given team-b borrows: a non-preemptible workload within min, a 4-pod gang and a high-priority pod
    _, qa, qb = pool
    now = timezone.now()
    make_workload(
        qb, name="keep", gpu_count=1, preemptible=False, started_at=now - timedelta(hours=3)
    )
    gang = make_gang(qb, "train", min_available=4)
    members = [
        make_workload(
            qb, name=f"train-{i}", gpu_count=1, gang=gang, started_at=now - timedelta(hours=1)
        )
        for i in range(4)
    ]
    make_workload(qb, name="important", gpu_count=1, priority=5, started_at=now)
    make_workload(qa, name="a-running", gpu_count=2)
    # and team-a asks for 2 more GPUs, within its min, while the group is full (2 + 6 = 8)
    claimant = make_workload(qa, name="a-new", state="pending", gpu_count=2)
    # when the reclaim is planned
    plan = plan_reclaim(group_snapshot(qa.group), claimant)
    # then the whole gang is the one victim (never 2 of its 4 pods), nothing else
    assert plan.satisfied is True
    assert [v.workload_ids for v in plan.victims] == [tuple(sorted(m.pk for m in members))]
    victim = plan.victims[0]
    assert (victim.gang_id, victim.name, victim.freed.gpu_milli) == (gang.pk, "train", 4000)
    assert victim.reason.startswith(
        "team-b GPU side uses 6 GPUs, above its runtime share of 4 GPUs (min 2 GPUs): "
        "reclaiming gang train (4 pods), 4 GPUs, priority 0, started "
    )
    assert victim.reason.endswith("for team-a's pending request of 2 GPUs within its min.")


def test_non_preemptible_work_is_never_chosen(pool):
    _, qa, qb = pool
    make_workload(qb, gpu_count=3, preemptible=False)
    gang = make_gang(qb, "mixed", min_available=3)
    make_workload(qb, gpu_count=1, gang=gang)
    make_workload(qb, gpu_count=1, gang=gang, preemptible=False)  # taints the whole gang
    make_workload(qa, gpu_count=3)
    claimant = make_workload(qa, state="pending", gpu_count=1)
    plan = plan_reclaim(group_snapshot(qa.group), claimant)
    assert plan.victims == ()
    assert plan.satisfied is False
    assert "nothing is reclaimed" in plan.claims[0].reason


def test_lowest_priority_then_most_recently_started_first(pool):
    _, qa, qb = pool
    now = timezone.now()
    old = make_workload(qb, name="old", gpu_count=1, started_at=now - timedelta(hours=2))
    new = make_workload(qb, name="new", gpu_count=1, started_at=now - timedelta(minutes=5))
    high = make_workload(qb, name="high", gpu_count=1, priority=10, started_at=now)
    make_workload(qb, name="base", gpu_count=3, started_at=now - timedelta(days=1))
    make_workload(qa, gpu_count=2)
    claimant = make_workload(qa, state="pending", gpu_count=2)
    plan = plan_reclaim(group_snapshot(qa.group), claimant)
    # team-b runs 6 with a runtime of 4: two units go, the most recent low-priority ones
    ids = [v.workload_ids for v in plan.victims]
    assert ids == [(new.pk,), (old.pk,)]
    assert high.pk not in plan.workload_ids


def test_assign_back_keeps_units_that_are_not_needed(pool):
    _, qa, qb = pool
    now = timezone.now()
    small = make_workload(qb, name="small", gpu_count=1, started_at=now)
    big = make_workload(qb, name="big", gpu_count=2, started_at=now - timedelta(minutes=1))
    make_workload(qb, name="base", gpu_count=3, started_at=now - timedelta(days=1))
    make_workload(qa, gpu_count=2)
    claimant = make_workload(qa, state="pending", gpu_count=2)
    plan = plan_reclaim(group_snapshot(qa.group), claimant)
    # greedy takes small (1) then big (2); big alone covers the 2 needed, so small keeps running
    assert [v.workload_ids for v in plan.victims] == [(big.pk,)]
    assert small.pk not in plan.workload_ids


def test_no_reclaim_for_a_request_beyond_its_share(pool):
    _, qa, qb = pool
    make_workload(qb, gpu_count=6)
    make_workload(qa, gpu_count=2)
    claimant = make_workload(qb, state="pending", gpu_count=1)
    plan = plan_reclaim(group_snapshot(qa.group), claimant)
    assert plan.victims == ()
    assert plan.claims[0].reason.startswith("not entitled to reclaim: team-b GPU side")


def test_no_reclaim_when_free_capacity_suffices(pool):
    _, qa, qb = pool
    make_workload(qb, gpu_count=4)
    claimant = make_workload(qa, state="pending", gpu_count=2)
    plan = plan_reclaim(group_snapshot(qa.group), claimant)
    assert (plan.victims, plan.satisfied) == ((), True)
    assert plan.claims[0].needed == Resources()


def test_a_pending_gang_is_one_claim_and_gets_one_plan(pool):
    # given team-b borrowing 4 GPUs as four single pods, and a pending 2-pod gang of team-a within its min
    _, qa, qb = pool
    now = timezone.now()
    make_workload(qb, name="base", gpu_count=2, started_at=now - timedelta(days=1))
    singles = [
        make_workload(qb, name=f"s{i}", gpu_count=1, started_at=now - timedelta(minutes=10 - i))
        for i in range(4)
    ]
    make_workload(qa, gpu_count=2)
    gang = make_gang(qa, "pair", min_available=2)
    members = [make_workload(qa, state="pending", gpu_count=1, gang=gang) for _ in range(2)]
    # when the reclaim is planned for the gang's members
    plan = plan_reclaim(group_snapshot(qa.group), members)
    # then one claim covers both members, freed by the two most recently started pods of team-b
    assert [c.workload_ids for c in plan.claims] == [tuple(m.pk for m in members)]
    assert plan.satisfied is True
    assert [v.workload_ids for v in plan.victims] == [(singles[3].pk,), (singles[2].pk,)]
