"""Fairness over time, pure: decayed GPU-hour usage, fair shares, budget states, loans applied to specs.

No database here: `quotas.fair_share`, `quotas.budgets` and `quotas.loans` read the rows and call these
functions; the snapshot (`quotas.usage`) carries the results on each `QuotaSpec`, so the cycle's pure
decide step (`scheduling.services.decide`) and admission read them as data.

**Decayed usage** of a quota: every past GPU-hour counts `0.5 ** (age / half_life)`: a GPU-hour used one
half-life ago counts half, two half-lives ago a quarter. Age is measured from the middle of the hour the
usage was recorded in to `now`.

**Fair share** within a group: the group's decayed usage split in proportion to each quota's GPU-side
weight (`Quota.weight_of("gpu").gpu_milli`: its shared weight, or its max). `ratio = usage / share`;
a quota over 1.0 used more than its weight's share recently and is put in **borrow tier 1**: idle
capacity goes to the quotas of tier 0 first (`quotas.runtime`), and within the group's queue its work
comes after theirs at equal priority (`scheduling.services.decide`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

OVER_SHARE_TIER = 1
"""The borrow tier of a quota that used more than its fair share (tier 0 = at or under it)."""

MAX_HALF_LIFE_HOURS = 24 * 90
"""The longest half-life a group may set (90 days)."""

LOOKBACK_HALF_LIVES = 6
"""Usage older than this many half-lives (weight under 1.6 %) is not read."""


@dataclass(frozen=True, slots=True)
class UsageHour:
    """GPU-hours one quota used in the hour starting at `hour`, on one GPU model."""

    quota_id: int
    hour: datetime
    gpu_hours: float
    gpu_model: str = ""


@dataclass(frozen=True, slots=True)
class FairShare:
    """One quota's standing in its group: decayed GPU-hours used, its fair share of the group's decayed
    GPU-hours, the ratio of the two and its borrow tier."""

    usage_gpu_hours: float
    share_gpu_hours: float
    ratio: float
    tier: int
    half_life_hours: int

    @property
    def percent(self) -> int:
        """The ratio as a whole percentage (140 = used 1.4× its share)."""
        if self.ratio == float("inf"):
            return 100_000
        return round(self.ratio * 100)

    def sentence(self) -> str:
        """What the quota page says, in plain words."""
        head = (
            f"With a {self.half_life_hours}-hour half-life, this quota used "
            f"{self.usage_gpu_hours:.1f} decayed GPU-hours against a fair share of "
            f"{self.share_gpu_hours:.1f} ({self.percent} %)"
        )
        if self.tier >= OVER_SHARE_TIER:
            return f"{head}, so borrowed GPUs go to the quotas under their share first."
        return f"{head}, so it is served before quotas over their share when borrowing."


def decay_weight(age: timedelta, half_life_hours: int) -> float:
    """`0.5 ** (age / half_life)`; age below zero counts as zero."""
    hours = max(age.total_seconds(), 0.0) / 3600.0
    return float(0.5 ** (hours / half_life_hours))


def decayed_usage(
    hours: Iterable[UsageHour], *, now: datetime, half_life_hours: int
) -> dict[int, float]:
    """Per quota id: the sum of its GPU-hours, each weighted by its decay (age from mid-hour to `now`)."""
    if half_life_hours <= 0:
        raise ValueError("decayed_usage: half_life_hours must be positive")
    totals: dict[int, float] = {}
    for row in hours:
        age = now - (row.hour + timedelta(minutes=30))
        weight = decay_weight(age, half_life_hours)
        totals[row.quota_id] = totals.get(row.quota_id, 0.0) + row.gpu_hours * weight
    return totals


def fair_shares(
    weights: Mapping[int, int], usage: Mapping[int, float], *, half_life_hours: int
) -> dict[int, FairShare]:
    """Per quota id of `weights`: its decayed usage, its weight's share of the group's decayed usage, the
    ratio and the borrow tier. No usage at all: every ratio 0, tier 0 (nothing to correct)."""
    total_weight = sum(max(w, 0) for w in weights.values())
    total_usage = sum(max(usage.get(q, 0.0), 0.0) for q in weights)
    result: dict[int, FairShare] = {}
    for quota_id in sorted(weights):
        used = max(usage.get(quota_id, 0.0), 0.0)
        weight = max(weights[quota_id], 0)
        share = total_usage * weight / total_weight if total_weight else 0.0
        if share > 0:
            ratio = used / share
        else:
            ratio = float("inf") if used > 0 else 0.0
        # a hair of tolerance so that rounding never flips two equal users into different tiers
        tier = OVER_SHARE_TIER if ratio > 1.0 + 1e-9 else 0
        result[quota_id] = FairShare(used, share, ratio, tier, half_life_hours)
    return result


# ------------------------------------------------------------------------------------------- budgets


@dataclass(frozen=True, slots=True)
class BudgetState:
    """A GPU-hour budget of one quota in its current period: GPU-hours charged so far (per model, or
    price-weighted in "price GPU-hours"), the limit including top-ups, and whether it is hard."""

    budget_id: int
    period_label: str
    used: float
    limit: float
    hard: bool
    unit: str = "GPU-hours"

    @property
    def fraction(self) -> float:
        if self.limit <= 0:
            return float("inf") if self.used > 0 else 1.0
        return self.used / self.limit

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit

    @property
    def percent(self) -> int:
        fraction = self.fraction
        return 100_000 if fraction == float("inf") else int(fraction * 100)

    def numbers(self) -> str:
        return f"{self.used:.1f} of {self.limit:.1f} {self.unit} used {self.period_label}"


def worst_budget(states: Sequence[BudgetState]) -> BudgetState | None:
    """The budget that binds first: a hard exhausted one, then the most used."""
    if not states:
        return None
    return max(
        states, key=lambda s: (s.exhausted and s.hard, s.exhausted, s.fraction, -s.budget_id)
    )


def budget_charge(
    hours: Iterable[UsageHour], *, gpu_model: str = "", prices: Mapping[str, float] | None = None
) -> float:
    """GPU-hours charged to a budget: only `gpu_model` (case-insensitive; "" = every model), each hour
    times its model's price when `prices` is given (a model not listed costs `prices["default"]`, 0
    when absent)."""
    wanted = gpu_model.strip().lower()
    charged = 0.0
    for row in hours:
        model = row.gpu_model.strip().lower()
        if wanted and model != wanted:
            continue
        if prices is None:
            charged += row.gpu_hours
        else:
            charged += row.gpu_hours * prices.get(model, prices.get("default", 0.0))
    return charged


# ------------------------------------------------------------------------------------------- loans


@dataclass(frozen=True, slots=True)
class LoanEffect:
    """An active loan: `fraction` of the lender's GPU-side min moves to the borrower while it lasts."""

    loan_id: int
    lender_id: int | None
    """None: the operators lend from the group's unassigned capacity (only the borrower changes)."""
    borrower_id: int
    gpus: int


# ----------------------------------------------------------------------------------- per-user caps


@dataclass(frozen=True, slots=True)
class UserCap:
    """The most GPU milli one person of a quota may hold (`cap_milli`) and what each holds now
    (owner id → GPU milli of their placed and running work)."""

    cap_milli: int
    used: Mapping[int, int]

    def used_by(self, owner_id: int) -> int:
        return int(self.used.get(owner_id, 0))


@dataclass(frozen=True, slots=True)
class EqualShare:
    """Equal share of a team's borrowing (per quota, optional): its active users (people with placed,
    running or waiting GPU work) and the GPU milli each holds now. A person may borrow at most the
    team's borrowing ÷ `active_users`, beyond an equal share of the min (quotas.admission)."""

    active_users: int
    used: Mapping[int, int]

    def used_by(self, owner_id: int) -> int:
        return int(self.used.get(owner_id, 0))

    def per_user(self, runtime_milli: int, min_milli: int) -> tuple[int, int, int]:
        """(the team's borrowing: its runtime share beyond min, each person's share of it, the most
        one person may hold: an equal share of min plus that), in GPU milli."""
        users = max(1, self.active_users)
        borrowing = max(0, runtime_milli - min_milli)
        return borrowing, borrowing // users, (max(runtime_milli, min_milli)) // users
