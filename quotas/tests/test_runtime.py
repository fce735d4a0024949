"""Runtime shares (quotas.runtime): Koordinator's worked example, the seed scenario, and properties."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.resources import Resources
from quotas.runtime import (
    QuotaShareInput,
    ShareInput,
    largest_remainder,
    runtime_1d,
    runtime_shares,
    scale_mins,
)

WORKED_EXAMPLE = [
    ShareInput("team-a", min=200, max=800, weight=800, demand=100),
    ShareInput("team-b", min=300, max=600, weight=600, demand=320),
    ShareInput("team-c", min=100, max=800, weight=800, demand=700),
    ShareInput("team-d", min=200, max=400, weight=400, demand=50, lend=False),
]


def test_koordinator_worked_example_is_reproduced_exactly():
    # given the four sibling quotas of k8s-integration.md §3.2 on 8 GPUs (800 gpu-core)
    # when the runtime is computed
    result = runtime_1d(800, WORKED_EXAMPLE)
    # then a = 100, b = 320, c = 180, d = 200 (Σ = 800)
    assert result == {"team-a": 100, "team-b": 320, "team-c": 180, "team-d": 200}


def test_koordinator_worked_example_when_team_a_demand_rises_to_300():
    entries = [
        e if e.name != "team-a" else ShareInput("team-a", 200, 800, 800, 300)
        for e in WORKED_EXAMPLE
    ]
    assert runtime_1d(800, entries) == {"team-a": 200, "team-b": 300, "team-c": 100, "team-d": 200}


def test_worked_example_first_round_gives_the_residual_unit_to_the_larger_remainder():
    # b: 600*100/1400 = 42 rem 1200, c: 800*100/1400 = 57 rem 200 → b gets the leftover unit
    assert largest_remainder(100, [("team-b", 600), ("team-c", 800)]) == {
        "team-b": 43,
        "team-c": 57,
    }


def test_largest_remainder_ties_go_to_the_name_first_in_order():
    assert largest_remainder(1, [("b", 1), ("a", 1)]) == {"a": 1, "b": 0}
    assert largest_remainder(5, [("x", 1), ("y", 1), ("z", 1)]) == {"x": 2, "y": 2, "z": 1}


def test_guarantee_raises_the_floor_like_koordinator_guarantee_usage():
    entries = [
        ShareInput("a", min=0, max=100, weight=1, demand=100, guarantee=60),
        ShareInput("b", min=0, max=100, weight=1, demand=100),
    ]
    assert runtime_1d(100, entries) == {"a": 80, "b": 20}


def test_seed_scenario_two_hungry_quotas_borrow_idle_capacity_two_to_one():
    # given 12 GPUs, an idle quota with min 6 that lends, and two hungry quotas, max_A = 2 × max_B
    capacity = Resources(gpu_milli=12000)
    quotas = [
        QuotaShareInput(
            "idle",
            Resources(gpu_milli=6000),
            Resources(gpu_milli=12000),
            Resources(gpu_milli=12000),
            Resources(),
        ),
        QuotaShareInput(
            "team-a",
            Resources(gpu_milli=0),
            Resources(gpu_milli=8000),
            Resources(gpu_milli=8000),
            Resources(gpu_milli=8000),
        ),
        QuotaShareInput(
            "team-b",
            Resources(gpu_milli=0),
            Resources(gpu_milli=4000),
            Resources(gpu_milli=4000),
            Resources(gpu_milli=4000),
        ),
    ]
    # when the runtime is computed
    result = runtime_shares(capacity, quotas)
    # then the 12 idle GPUs are split 2:1 (8 and 4) — both are at their max
    assert result["team-a"].gpu_milli == 8000
    assert result["team-b"].gpu_milli == 4000
    # and with only 9 GPUs of capacity the split is 6:3
    small = runtime_shares(Resources(gpu_milli=9000), quotas)
    assert (small["team-a"].gpu_milli, small["team-b"].gpu_milli, small["idle"].gpu_milli) == (
        6000,
        3000,
        0,
    )
    # and with 10 GPUs: 6667:3333 (within one milli-unit of 2:1)
    ten = runtime_shares(Resources(gpu_milli=10000), quotas)
    assert (ten["team-a"].gpu_milli, ten["team-b"].gpu_milli) == (6667, 3333)
    assert abs(ten["team-a"].gpu_milli - 2 * ten["team-b"].gpu_milli) <= 1


def test_min_scaling_when_capacity_shrinks_below_the_sum_of_mins():
    entries = [ShareInput("a", 600, 800, 800, 800), ShareInput("b", 300, 800, 800, 800)]
    # 900 of min on 600 of capacity: scaled 400/200 exactly
    assert scale_mins(600, entries) == {"a": 400, "b": 200}
    assert runtime_1d(600, entries) == {"a": 400, "b": 200}


def test_quota_that_keeps_its_idle_min_is_not_borrowed_from():
    entries = [
        ShareInput("keeps", min=400, max=800, weight=800, demand=0, lend=False),
        ShareInput("hungry", min=0, max=800, weight=800, demand=800),
    ]
    assert runtime_1d(800, entries) == {"keeps": 400, "hungry": 400}
    lends = [ShareInput("keeps", 400, 800, 800, 0, lend=True), entries[1]]
    assert runtime_1d(800, lends) == {"keeps": 0, "hungry": 800}


def test_zero_weight_quota_gets_its_min_but_never_borrows():
    entries = [ShareInput("a", 100, 800, 0, 800), ShareInput("b", 100, 800, 1, 800)]
    assert runtime_1d(800, entries) == {"a": 100, "b": 700}


def test_dimensions_are_computed_independently():
    quotas = [
        QuotaShareInput(
            "a",
            Resources(),
            Resources(4000, 0, 8000, 0),
            Resources(1, 1, 1, 1),
            Resources(4000, 0, 1000, 0),
        ),
        QuotaShareInput(
            "b",
            Resources(),
            Resources(4000, 0, 8000, 0),
            Resources(1, 1, 1, 1),
            Resources(4000, 0, 8000, 0),
        ),
    ]
    result = runtime_shares(Resources(6000, 0, 8000, 0), quotas)
    assert result == {"a": Resources(3000, 0, 1000, 0), "b": Resources(3000, 0, 7000, 0)}


# ----------------------------------------------------------------------------------- properties


@st.composite
def siblings(draw):  # type: ignore[no-untyped-def]
    count = draw(st.integers(min_value=1, max_value=7))
    entries = []
    for index in range(count):
        maximum = draw(st.integers(min_value=0, max_value=5000))
        minimum = draw(st.integers(min_value=0, max_value=maximum))
        entries.append(
            ShareInput(
                name=f"q{index}",
                min=minimum,
                max=maximum,
                weight=draw(st.one_of(st.just(maximum), st.integers(min_value=0, max_value=100))),
                demand=draw(st.integers(min_value=0, max_value=6000)),
                lend=draw(st.booleans()),
            )
        )
    total = draw(st.integers(min_value=0, max_value=20000))
    return total, entries


def _effective_cap(e: ShareInput) -> int:
    wanted = min(e.demand, e.max)
    return wanted if e.lend else min(max(wanted, e.min), e.max)


@settings(max_examples=400, deadline=None)
@given(siblings())
def test_property_runtime_never_exceeds_max_or_demand(case):
    total, entries = case
    result = runtime_1d(total, entries)
    for e in entries:
        assert 0 <= result[e.name] <= e.max
        # a lending quota never gets more than it asks for; one keeping its idle min at most its min
        assert result[e.name] <= _effective_cap(e)


@settings(max_examples=400, deadline=None)
@given(siblings())
def test_property_runtimes_sum_to_at_most_capacity(case):
    total, entries = case
    assert sum(runtime_1d(total, entries).values()) <= total


@settings(max_examples=400, deadline=None)
@given(siblings())
def test_property_min_is_granted_when_demand_reaches_it_and_mins_fit(case):
    total, entries = case
    if sum(e.min for e in entries) > total:
        return
    result = runtime_1d(total, entries)
    for e in entries:
        if e.demand >= e.min:
            assert result[e.name] >= e.min


@settings(max_examples=300, deadline=None)
@given(siblings(), st.randoms(use_true_random=False))
def test_property_independent_of_input_order(case, rnd: random.Random):
    total, entries = case
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    assert runtime_1d(total, shuffled) == runtime_1d(total, entries)


@settings(max_examples=300, deadline=None)
@given(siblings())
def test_property_work_conserving_pool_is_used_while_someone_is_hungry(case):
    total, entries = case
    if sum(e.min for e in entries) > total:
        return
    result = runtime_1d(total, entries)
    hungry_with_weight = [e for e in entries if result[e.name] < _effective_cap(e) and e.weight > 0]
    if hungry_with_weight:
        # nothing is left idle while a borrower with weight still wants more
        assert sum(result.values()) == total
