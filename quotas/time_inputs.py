"""What fairness over time adds to a group's snapshot, read from the database at one moment `now`:
decayed fair shares, budget states and active loans (pure rules in `quotas.fairness`).

`quotas.usage` calls `time_inputs(group, now)` when it builds a snapshot, so the pages, the picker's
preview, admission and the scheduling cycle all see the same figures; the cycle's decide step gets them
as data on each `QuotaSpec`. Writes are elsewhere (`quotas.budgets`, `quotas.loans`); this module
imports neither them nor `quotas.usage`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from core.units import MILLI_PER_GPU
from quotas.cluster import cluster_rows
from quotas.fairness import (
    LOOKBACK_HALF_LIVES,
    BudgetState,
    EqualShare,
    FairShare,
    LoanEffect,
    UsageHour,
    UserCap,
    budget_charge,
    decayed_usage,
    fair_shares,
    worst_budget,
)
from quotas.models import (
    BudgetPeriod,
    BudgetWeighting,
    BudgetWindow,
    GpuHourBudget,
    LoanState,
    Quota,
    QuotaGroup,
    QuotaLoan,
)
from quotas.resources import Side

ROLLING_DAYS = {BudgetPeriod.WEEK: 7, BudgetPeriod.MONTH: 30}


@dataclass(frozen=True)
class TimeInputs:
    """Per quota id: its fair share (fair share on), its binding budget, the active loans touching it."""

    fair_shares: dict[int, FairShare] = field(default_factory=dict)
    budgets: dict[int, BudgetState] = field(default_factory=dict)
    loans: tuple[LoanEffect, ...] = ()
    user_caps: dict[int, UserCap] = field(default_factory=dict)
    equal_shares: dict[int, EqualShare] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (
            self.fair_shares or self.budgets or self.loans or self.user_caps or self.equal_shares
        )


def period_bounds(period: str, window: str, now: datetime) -> tuple[datetime, str]:
    """The start of the budget period containing `now` and how to say it. Calendar: Monday 00:00 UTC
    (week) or the 1st 00:00 UTC (month); rolling: the last 7 or 30 days."""
    if window == BudgetWindow.ROLLING:
        days = ROLLING_DAYS[BudgetPeriod(period)]
        return now - timedelta(days=days), f"in the last {days} days"
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == BudgetPeriod.MONTH:
        start = midnight.replace(day=1)
        return start, f"this month (since {start:%d %b} 00:00 UTC)"
    start = midnight - timedelta(days=midnight.weekday())
    return start, f"this week (since Mon {start:%d %b} 00:00 UTC)"


FAIR_SHARE_CACHE_SECONDS = 60.0
"""The longest a cached fair-share reading is used, even while its key is unchanged."""

_fair_share_cache: dict[int, tuple[tuple[object, ...], datetime, dict[int, FairShare]]] = {}


def cached_group_fair_shares(
    group: QuotaGroup, now: datetime, quotas: Sequence[Quota], key: object
) -> dict[int, FairShare]:
    """`group_fair_shares`, read once per `key` (the scheduling cycle passes its shard's version: the
    recorded usage the read sums changes far more slowly than cycles run) and at most
    `FAIR_SHARE_CACHE_SECONDS` old; a change of the half-life or of any quota (its version) reads again.
    Saves the usage read's queries on every cycle snapshot of a group with fair share on."""
    half_life = group.fair_share_half_life_hours
    if not half_life:
        return {}
    full_key = (key, half_life, tuple(sorted((int(q.pk), int(q.version)) for q in quotas)))
    hit = _fair_share_cache.get(int(group.pk))
    if (
        hit is not None
        and hit[0] == full_key
        and timedelta(0) <= now - hit[1] <= timedelta(seconds=FAIR_SHARE_CACHE_SECONDS)
    ):
        return hit[2]
    shares = group_fair_shares(group, now)
    _fair_share_cache[int(group.pk)] = (full_key, now, shares)
    return shares


def forget_fair_shares(group_id: int | None = None) -> None:
    """Drop the cached fair-share readings (one group's, or all)."""
    if group_id is None:
        _fair_share_cache.clear()
    else:
        _fair_share_cache.pop(int(group_id), None)


def group_fair_shares(group: QuotaGroup, now: datetime) -> dict[int, FairShare]:
    """The decayed fair share of every quota of `group` (empty when the group has it off)."""
    half_life = group.fair_share_half_life_hours
    if not half_life:
        return {}
    since = now - timedelta(hours=half_life * LOOKBACK_HALF_LIVES)
    hours = cluster_rows().gpu_usage_hours(int(group.pk), since, now)
    weights = {int(q.pk): q.weight_of(Side.GPU).gpu_milli for q in group.quotas.all()}
    usage = decayed_usage(hours, now=now, half_life_hours=half_life)
    return fair_shares(weights, usage, half_life_hours=half_life)


def budget_state(
    budget: GpuHourBudget,
    hours: Sequence[UsageHour],
    now: datetime,
    prices: dict[str, float] | None = None,
) -> BudgetState:
    """The budget in its current period, from the quota's usage `hours` (any range covering it)."""
    start, label = period_bounds(budget.period, budget.window, now)
    in_period = [h for h in hours if h.quota_id == budget.quota_id and start <= h.hour < now]
    weighted = budget.weighting == BudgetWeighting.PRICE
    used = budget_charge(
        in_period, gpu_model=budget.gpu_model, prices=(prices or {}) if weighted else None
    )
    top_ups = sum(float(t.gpu_hours) for t in budget.top_ups.all() if start <= t.created_at <= now)
    return BudgetState(
        budget_id=int(budget.pk),
        period_label=label,
        used=round(used, 6),
        limit=float(budget.limit_gpu_hours) + top_ups,
        hard=bool(budget.hard),
        unit="price-weighted GPU-hours" if weighted else "GPU-hours",
    )


def quota_budget_states(
    budgets: Sequence[GpuHourBudget], group_id: int, now: datetime
) -> dict[int, BudgetState]:
    """The state of each of `budgets` (all of one group), by budget id; one usage read."""
    if not budgets:
        return {}
    since = min(period_bounds(b.period, b.window, now)[0] for b in budgets)
    hours = cluster_rows().gpu_usage_hours(group_id, since, now)
    needs_prices = any(b.weighting == BudgetWeighting.PRICE for b in budgets)
    prices = cluster_rows().gpu_hour_prices() if needs_prices else None
    return {int(b.pk): budget_state(b, hours, now, prices) for b in budgets}


def budget_states(budgets: Sequence[GpuHourBudget], now: datetime) -> dict[int, BudgetState]:
    """The state of each of `budgets` (of any groups; `quota` read along), by budget id: one usage
    read per group, however many budgets (a list page of them)."""
    by_group: dict[int, list[GpuHourBudget]] = {}
    for budget in budgets:
        by_group.setdefault(int(budget.quota.group_id), []).append(budget)
    states: dict[int, BudgetState] = {}
    for group_id, listed in by_group.items():
        states.update(quota_budget_states(listed, group_id, now))
    return states


def group_budgets(group: QuotaGroup, now: datetime) -> dict[int, BudgetState]:
    """Per quota id of `group`: the budget that binds first (see `fairness.worst_budget`)."""
    budgets = list(
        GpuHourBudget.objects.filter(quota__group=group).prefetch_related("top_ups").order_by("id")
    )
    states = quota_budget_states(budgets, int(group.pk), now)
    per_quota: dict[int, list[BudgetState]] = {}
    for b in budgets:
        per_quota.setdefault(int(b.quota_id), []).append(states[int(b.pk)])
    result = {}
    for quota_id, listed in per_quota.items():
        worst = worst_budget(listed)
        if worst is not None:
            result[quota_id] = worst
    return result


def active_loan_effects(group: QuotaGroup | int, now: datetime) -> tuple[LoanEffect, ...]:
    """The approved loans of the group whose window contains `now` (expired by the clock even if the
    expiry task has not run yet), by id."""
    group_id = group if isinstance(group, int) else group.pk
    rows = QuotaLoan.objects.filter(
        group_id=group_id, state=LoanState.APPROVED, starts_at__lte=now, ends_at__gt=now
    ).order_by("id")
    return tuple(
        LoanEffect(
            int(r.pk),
            int(r.lender_id) if r.lender_id is not None else None,
            int(r.borrower_id),
            int(r.gpus),
        )
        for r in rows
    )


def user_caps(group: QuotaGroup, quotas: Sequence[Quota] | None = None) -> dict[int, UserCap]:
    """Per quota of `group` (its rows `quotas`, read when None) with a per-person cap: the cap and the
    GPU milli each owner holds now (placed and running work; work without an owner counts for nobody)."""
    rows = list(group.quotas.all()) if quotas is None else quotas
    capped = {int(q.pk): int(cap) for q in rows if (cap := q.max_gpus_per_user)}
    if not capped:
        return {}
    held: dict[int, dict[int, int]] = {int(q): {} for q in capped}
    held_rows = (
        cluster_rows()
        .charged_workloads(int(group.pk))
        .filter(quota_id__in=list(capped), state__in=cluster_rows().active_states)
        .exclude(owner_id=None)
        .values_list("quota_id", "owner_id", "gpu_count", "gpu_milli")
    )
    for quota_id, owner_id, gpu_count, gpu_milli in held_rows:
        per_owner = held[int(quota_id)]
        per_owner[int(owner_id)] = per_owner.get(int(owner_id), 0) + int(gpu_count) * int(gpu_milli)
    return {int(q): UserCap(int(cap) * MILLI_PER_GPU, held[int(q)]) for q, cap in capped.items()}


def equal_shares(group: QuotaGroup, quotas: Sequence[Quota] | None = None) -> dict[int, EqualShare]:
    """Per quota of `group` (its rows `quotas`, read when None) that shares its borrowing equally: its
    active users (owners of placed, running or waiting GPU work) and the GPU milli each holds now."""
    rows = list(group.quotas.all()) if quotas is None else quotas
    sharing = [int(q.pk) for q in rows if q.equal_borrowing_share]
    if not sharing:
        return {}
    users: dict[int, set[int]] = {q: set() for q in sharing}
    held: dict[int, dict[int, int]] = {q: {} for q in sharing}
    active = cluster_rows().active_states
    workloads = (
        cluster_rows()
        .charged_workloads(int(group.pk))
        .filter(quota_id__in=sharing, gpu_count__gt=0)
        .exclude(owner_id=None)
        .values_list("quota_id", "owner_id", "state", "gpu_count", "gpu_milli")
    )
    for quota_id, owner_id, state, gpu_count, gpu_milli in workloads:
        users[int(quota_id)].add(int(owner_id))
        if state in active:
            per_owner = held[int(quota_id)]
            per_owner[int(owner_id)] = per_owner.get(int(owner_id), 0) + int(gpu_count) * int(
                gpu_milli
            )
    return {q: EqualShare(len(users[q]), held[q]) for q in sharing}


def time_inputs(
    group: QuotaGroup,
    now: datetime,
    quotas: Sequence[Quota] | None = None,
    *,
    fair_share_key: object = None,
) -> TimeInputs:
    """Everything fairness over time adds to a snapshot of `group` at `now` (`quotas`: the group's
    quota rows when the caller has them already; `fair_share_key`: reuse the fair-share reading while
    it is unchanged, see `cached_group_fair_shares`)."""
    fair = (
        cached_group_fair_shares(group, now, quotas, fair_share_key)
        if fair_share_key is not None and quotas is not None
        else group_fair_shares(group, now)
    )
    return TimeInputs(
        fair_shares=fair,
        budgets=group_budgets(group, now),
        loans=active_loan_effects(group, now),
        user_caps=user_caps(group, quotas),
        equal_shares=equal_shares(group, quotas),
    )


def lent_gpus(lender: Quota, starts_at: datetime, ends_at: datetime, *, exclude: int = 0) -> int:
    """GPUs of `lender`'s min already promised by approved loans overlapping [starts_at, ends_at)."""
    overlapping = QuotaLoan.objects.filter(
        lender=lender, state=LoanState.APPROVED, starts_at__lt=ends_at, ends_at__gt=starts_at
    ).exclude(pk=exclude)
    return sum(int(loan.gpus) for loan in overlapping)


@dataclass(frozen=True)
class LentPeak:
    """The most GPUs a lender's approved loans promise at once, and the first window where they do."""

    gpus: int
    starts_at: datetime
    ends_at: datetime


def peak_lent_gpus(lender: Quota, since: datetime) -> LentPeak | None:
    """The most GPUs of `lender`'s min its approved loans promise at once from `since` on (a sweep
    over their [starts_at, ends_at) windows); None when no approved loan runs after `since`."""
    rows = QuotaLoan.objects.filter(
        lender=lender, state=LoanState.APPROVED, ends_at__gt=since
    ).values_list("gpus", "starts_at", "ends_at")
    # (moment, order, change): at one instant a loan that ends (order 0) frees before one starts
    events = sorted(
        event
        for gpus, starts_at, ends_at in rows
        for event in ((max(starts_at, since), 1, int(gpus)), (ends_at, 0, -int(gpus)))
    )
    peak: LentPeak | None = None
    lent = 0
    for index, (moment, _, change) in enumerate(events):
        lent += change
        if change > 0 and (peak is None or lent > peak.gpus):
            peak = LentPeak(lent, moment, events[index + 1][0])  # a start is never the last event
    return peak
