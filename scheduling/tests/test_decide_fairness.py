"""Fairness over time in the cycle's pure decide step: the decayed fair share and the GPU-hour budget
enter as data on the quotas' specs (no database here, as in test_decide.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from core.placement.tests.builders import node
from quotas.fairness import BudgetState, FairShare
from scheduling.services.decide import decide
from scheduling.tests.test_decide import codes, cycle_input, pending, placed, quota

# team-a used 3x its share of the group's decayed GPU-hours last week (all of them), team-b none;
# the lender keeps a min of 8 idle GPUs that both want to borrow.
OVER = FairShare(
    usage_gpu_hours=672.0, share_gpu_hours=224.0, ratio=3.0, tier=1, half_life_hours=168
)
UNDER = FairShare(
    usage_gpu_hours=0.0, share_gpu_hours=224.0, ratio=0.0, tier=0, half_life_hours=168
)


def _teams(fair: bool):  # type: ignore[no-untyped-def]
    a, b = quota(1, "team-a", gpu_max=8), quota(2, "team-b", gpu_max=8)
    lender = quota(3, "lender", gpu_min=8)
    if fair:
        a, b = replace(a, fair_share=OVER), replace(b, fair_share=UNDER)
        lender = replace(lender, fair_share=UNDER)
    # team-a asked first (minutes 0-7), team-b after (minutes 10-17)
    waiting = (
        *(pending(i, 1, minute=i) for i in range(1, 9)),
        *(pending(10 + i, 2, minute=10 + i) for i in range(1, 9)),
    )
    return cycle_input([a, b, lender], [node("n1", 8)], waiting=waiting)


def test_without_fair_share_the_idle_min_is_split_by_weight() -> None:
    decision = decide(_teams(fair=False))
    assert sorted(placed(decision)) == [1, 2, 3, 4, 11, 12, 13, 14]


def test_the_team_that_used_three_times_its_share_gets_borrowed_gpus_only_after_the_other() -> None:
    decision = decide(_teams(fair=True))
    assert sorted(placed(decision)) == list(range(11, 19))
    assert codes(decision) == {i: ("quota_runtime", i) for i in range(1, 9)}
    assert decision.waiting[1].reason == (
        "team-a GPU side: 0 in use + request 1 is more than its runtime share of 0 GPUs (min 0, max 8); "
        "sibling quotas are using or asking for the rest of the group's capacity."
    )


def test_once_the_under_share_team_is_served_the_other_borrows_the_rest() -> None:
    cycle = _teams(fair=True)
    fewer = tuple(p for p in cycle.pending if p.workload_id not in range(14, 19))  # b asks for 3
    cycle = cycle_input(
        list(cycle.quota.specs),
        [node("n1", 8)],
        waiting=fewer,
    )
    decision = decide(cycle)
    assert sorted(placed(decision)) == [1, 2, 3, 4, 5, 11, 12, 13]


EXHAUSTED = BudgetState(budget_id=5, period_label="this week (since Mon 30 Nov 00:00 UTC)",
                        used=412.0, limit=400.0, hard=False)  # fmt: skip


def test_an_exhausted_budget_stops_borrowing_with_the_reason_and_numbers_on_each_waiting_request() -> (
    None
):
    a = replace(quota(1, "team-a", gpu_min=2, gpu_max=8), budget=EXHAUSTED)
    cycle = cycle_input(
        [a, quota(3, "lender", gpu_min=6)],
        [node("n1", 8)],
        waiting=tuple(pending(i, 1, minute=i) for i in range(1, 5)),
    )
    decision = decide(cycle)
    assert placed(decision) == {1: "n1", 2: "n1"}  # within its min of 2: still runs
    assert codes(decision) == {3: ("budget_exhausted", 1), 4: ("budget_exhausted", 2)}
    assert decision.waiting[3].reason == (
        "team-a GPU side: GPU-hour budget exhausted (412.0 of 400.0 GPU-hours used this week (since "
        "Mon 30 Nov 00:00 UTC), 103 %); new borrowing beyond min 2 GPUs stops until the period resets "
        "or an operator tops it up (work within min still starts)."
    )


def test_a_hard_budget_stops_work_within_min_too() -> None:
    a = replace(quota(1, "team-a", gpu_min=2, gpu_max=8), budget=replace(EXHAUSTED, hard=True))
    cycle = cycle_input([a], [node("n1", 8)], waiting=(pending(1, 1),))
    decision = decide(cycle)
    assert placed(decision) == {}
    assert codes(decision) == {1: ("budget_exhausted", 1)}
    assert "the budget is hard, so nothing new starts" in decision.waiting[1].reason


def test_a_budget_under_100_percent_changes_nothing() -> None:
    a = replace(quota(1, "team-a", gpu_max=8), budget=replace(EXHAUSTED, used=399.0))
    cycle = cycle_input([a], [node("n1", 8)], waiting=tuple(pending(i, 1) for i in range(1, 4)))
    assert sorted(placed(decide(cycle))) == [1, 2, 3]


def test_one_person_cannot_take_the_teams_whole_burst() -> None:
    from quotas.fairness import UserCap

    capped = replace(quota(1, "team-a", gpu_max=8), user_cap=UserCap(3000, {7: 1000}))
    mine = tuple(
        replace(p, usage=replace(p.usage, owner_id=7))
        for p in (pending(i, 1, minute=i) for i in (1, 2, 3))
    )
    theirs = tuple(
        replace(p, usage=replace(p.usage, owner_id=8))
        for p in (pending(i, 1, minute=i) for i in (4, 5))
    )
    decision = decide(cycle_input([capped], [node("n1", 8)], waiting=(*mine, *theirs)))
    assert sorted(placed(decision)) == [1, 2, 4, 5]  # person 7 already held 1: 2 more reach 3
    assert codes(decision) == {3: ("user_cap", 1)}
    assert decision.waiting[3].reason == (
        "team-a: one person may hold at most 3 GPUs of this quota; its owner holds 1 + 2 admitted "
        "this cycle, request 1."
    )


def test_minimum_runtime_protects_work_that_just_started_from_reclaim() -> None:
    from scheduling.tests.test_decide import T0, _lent_pool

    # the gang (priority 9) started at T0+1 min, the single job (priority 5) at T0+2 min: reclaim
    # takes the lower priority first, unless it is younger than the minimum runtime
    assert decide(_lent_pool(gang_priority=9)).reclaim.victim_ids == (13,)  # type: ignore[union-attr]
    young = replace(_lent_pool(gang_priority=9), protect_started_after=T0 + timedelta(seconds=90))
    decision = decide(young)
    assert decision.reclaim is not None
    assert decision.reclaim.victim_ids == (11, 12)
    nobody = replace(_lent_pool(), protect_started_after=T0)
    decision = decide(nobody)
    assert decision.reclaim is None  # everything borrowed is younger than the minimum runtime
    assert decision.waiting[1].code == "insufficient_gpu"
