"""Fairness over time, the pure rules (no database): decay, fair shares, borrow tiers in the runtime
shares, budget charges, what a loan moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from quotas.fairness import (
    BudgetState,
    FairShare,
    LoanEffect,
    UsageHour,
    budget_charge,
    decayed_usage,
    fair_shares,
    worst_budget,
)
from quotas.resources import Resources, Side
from quotas.runtime import ShareInput, runtime_1d
from quotas.time_inputs import TimeInputs, period_bounds
from quotas.usage import QuotaSpec, apply_time_inputs, loan_moves

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # a Wednesday


def hour_ago(hours: float) -> datetime:
    """The start of the hour whose middle is `hours` before NOW."""
    return NOW - timedelta(hours=hours) - timedelta(minutes=30)


def test_a_gpu_hour_one_half_life_ago_counts_half_and_two_half_lives_a_quarter() -> None:
    rows = [
        UsageHour(1, hour_ago(0), 8.0),
        UsageHour(1, hour_ago(168), 8.0),
        UsageHour(1, hour_ago(336), 8.0),
        UsageHour(2, hour_ago(168), 4.0),
    ]
    assert decayed_usage(rows, now=NOW, half_life_hours=168) == {1: 14.0, 2: 2.0}


def test_the_team_that_used_three_times_its_share_is_over_it_and_the_idle_one_under() -> None:
    shares = fair_shares({1: 1, 2: 1, 3: 1}, {1: 300.0, 2: 0.0}, half_life_hours=168)
    assert shares[1] == FairShare(300.0, 100.0, 3.0, 1, 168)
    assert shares[2] == FairShare(0.0, 100.0, 0.0, 0, 168)
    assert shares[1].percent == 300
    assert "300 %" in shares[1].sentence()
    assert "borrowed GPUs go to the quotas under their share first" in shares[1].sentence()


def test_nobody_used_anything_so_nobody_is_over_share() -> None:
    shares = fair_shares({1: 5, 2: 1}, {}, half_life_hours=24)
    assert [(s.ratio, s.tier) for s in shares.values()] == [(0.0, 0), (0.0, 0)]


def _entries(tier_a: int) -> list[ShareInput]:
    return [
        ShareInput("a", min=0, max=8000, weight=1, demand=8000, tier=tier_a),
        ShareInput("b", min=0, max=8000, weight=1, demand=8000),
        ShareInput("lender", min=8000, max=8000, weight=1, demand=0),
    ]


def test_idle_capacity_goes_to_the_under_share_tier_first() -> None:
    assert runtime_1d(8000, _entries(tier_a=0)) == {"a": 4000, "b": 4000, "lender": 0}
    assert runtime_1d(8000, _entries(tier_a=1)) == {"a": 0, "b": 8000, "lender": 0}


def test_the_over_share_tier_gets_what_the_under_share_tier_leaves() -> None:
    entries = _entries(tier_a=1)
    entries[1] = ShareInput("b", min=0, max=8000, weight=1, demand=3000)
    assert runtime_1d(8000, entries) == {"a": 5000, "b": 3000, "lender": 0}


def test_budget_charge_counts_one_model_or_weights_by_price() -> None:
    rows = [UsageHour(1, NOW, 10.0, "H100"), UsageHour(1, NOW, 4.0, "T4")]
    assert budget_charge(rows) == 14.0
    assert budget_charge(rows, gpu_model="h100") == 10.0
    assert budget_charge(rows, prices={"h100": 4.0, "default": 0.5}) == 42.0


def test_a_hard_exhausted_budget_binds_before_a_fuller_soft_one() -> None:
    soft = BudgetState(1, "this week", 150.0, 100.0, hard=False)
    hard = BudgetState(2, "this month", 100.0, 100.0, hard=True)
    assert worst_budget([soft, hard]) is hard
    assert (soft.exhausted, soft.percent, hard.exhausted) == (True, 150, True)


def test_calendar_weeks_start_monday_and_rolling_months_are_thirty_days() -> None:
    assert period_bounds("week", "calendar", NOW) == (
        datetime(2026, 11, 30, tzinfo=UTC),
        "this week (since Mon 30 Nov 00:00 UTC)",
    )
    assert period_bounds("month", "calendar", NOW)[0] == datetime(2026, 12, 1, tzinfo=UTC)
    assert period_bounds("month", "rolling", NOW) == (
        NOW - timedelta(days=30),
        "in the last 30 days",
    )


def _spec(quota_id: int, gpus_min: int, gpus_max: int, memory_min: int = 0) -> QuotaSpec:
    return QuotaSpec(
        quota_id=quota_id,
        name=f"q{quota_id}",
        tenant_id=quota_id,
        tenant_slug=f"t{quota_id}",
        lend_idle_min=True,
        min={
            Side.GPU: Resources(gpus_min * 1000, memory_min, 64000, 0),
            Side.CPU: Resources(),
        },
        max={Side.GPU: Resources(gpus_max * 1000, 10**9, 10**9, 10**9), Side.CPU: Resources()},
        weight={Side.GPU: Resources(1, 1, 1, 1), Side.CPU: Resources(1, 1, 1, 1)},
    )


def test_a_loan_moves_the_same_fraction_of_every_gpu_side_dimension_of_the_lenders_min() -> None:
    lender = _spec(1, 8, 8, memory_min=8 * 81920)
    assert loan_moves(lender, 2) == Resources(2000, 2 * 81920, 16000, 0)
    lent, borrowed = apply_time_inputs(
        [lender, _spec(2, 0, 2)], TimeInputs(loans=(LoanEffect(7, 1, 2, 2),))
    )
    assert lent.min[Side.GPU] == Resources(6000, 6 * 81920, 48000, 0)
    assert borrowed.min[Side.GPU] == Resources(2000, 2 * 81920, 64000 + 16000, 0)
    assert borrowed.max[Side.GPU].gpu_milli == 4000
    assert lent.loans == borrowed.loans == (LoanEffect(7, 1, 2, 2),)
