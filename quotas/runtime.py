"""Runtime shares: how much of a group's capacity each sibling quota may use right now.

Pure, exact in integers, deterministic and independent of input order. It follows Koordinator's
`pkg/scheduler/plugins/elasticquota/core/runtime_quota_calculator.go` (docs/quotas.md says where we
differ), per dimension:

0. **Min scaling.** If the mins of a dimension add up to more than the capacity (nodes were lost), every min is
   scaled to `capacity × min / Σ min` — with largest-remainder rounding (ties by name), so the scaled mins add
   up to the capacity exactly (Koordinator truncates and can leave units unassigned).
1. **First pass.** `request = min(demand, max)`, raised to `min` when the quota does not lend its idle min.
   With `m = max(min', guarantee)`: a quota asking for more than `m` gets `m` and becomes a borrower; a quota
   asking for less gets its request if it lends (its idle min goes to the pool), or `m` if it keeps it.
2. **Redistribution.** The pool (capacity − Σ runtime) is handed out to the borrowers in proportion to their
   weight: `floor(weight × pool / W)` each, the leftover units one each to the largest remainders (ties by
   name). A borrower that reaches its request gives back the surplus, which is handed out again among the
   borrowers still hungry, until the pool or the borrowers run out. With borrow tiers (decayed fair share,
   `quotas.fairness`: 0 = at or under its fair share, 1 = over it) the pool goes to tier 0 first and only
   what it leaves to tier 1; every quota is tier 0 when the group has fair share off.

Guarantees (tested by property tests): a runtime never exceeds `max`, nor `demand` unless the quota keeps
its idle min (then it is at most `max(demand, min)`); runtimes add up to at most the capacity; a quota whose
demand reaches its min gets its min whenever the mins fit; the result does not depend on input order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from quotas.resources import DIMENSIONS, Resources


@dataclass(frozen=True, slots=True)
class ShareInput:
    """One sibling quota in one dimension. `name` must be unique among the siblings (it breaks ties)."""

    name: str
    min: int
    max: int
    weight: int
    demand: int
    lend: bool = True
    guarantee: int = 0
    tier: int = 0
    """Borrow tier (quotas.fairness): the pool goes to the hungry borrowers of the lowest tier first."""


@dataclass(frozen=True, slots=True)
class QuotaShareInput:
    """One sibling quota on one side, in all four dimensions (see `runtime_shares`)."""

    name: str
    min: Resources
    max: Resources
    weight: Resources
    demand: Resources
    lend: bool = True
    tier: int = 0


def largest_remainder(amount: int, weights: Sequence[tuple[str, int]]) -> dict[str, int]:
    """Split `amount` among `weights` ((name, weight) pairs) in proportion to weight, in integers.

    Each gets `floor(weight × amount / W)`; the `amount − Σ` leftover units go one each to the largest
    remainders `weight × amount mod W`, ties by name ascending (Hamilton's method). Zero weights get 0.
    Returns {name: share}; Σ share == amount when W > 0.
    """
    total_weight = sum(w for _, w in weights)
    shares = {name: 0 for name, _ in weights}
    if total_weight <= 0 or amount <= 0:
        return shares
    remainders = []
    for name, weight in weights:
        if weight > 0:
            quotient, remainder = divmod(weight * amount, total_weight)
            shares[name] = quotient
            remainders.append((-remainder, name))
    leftover = amount - sum(shares.values())
    for _, name in sorted(remainders)[:leftover]:
        shares[name] += 1
    return shares


def scale_mins(total: int, entries: Sequence[ShareInput]) -> dict[str, int]:
    """Step 0: the mins, scaled down in proportion when they add up to more than `total`.

    Largest-remainder rounding so that the scaled mins add up to exactly `total` (Koordinator truncates).
    """
    mins = {e.name: max(0, e.min) for e in entries}
    needed = sum(mins.values())
    if needed <= max(total, 0):
        return mins
    return largest_remainder(max(total, 0), sorted(mins.items()))


def runtime_1d(total: int, entries: Sequence[ShareInput]) -> dict[str, int]:
    """The runtime share of each sibling in one dimension with `total` capacity.

    Args:
        total: the group's capacity in this dimension.
        entries: the siblings; names must be unique.

    Returns:
        {name: runtime}, exact integers.
    """
    ordered = sorted(entries, key=lambda e: e.name)
    names = [e.name for e in ordered]
    if len(set(names)) != len(names):
        raise ValueError("runtime_1d: sibling names must be unique")
    scaled_min = scale_mins(total, ordered)
    runtime: dict[str, int] = {}
    request: dict[str, int] = {}
    borrowers: list[ShareInput] = []
    pool = max(total, 0)
    for entry in ordered:
        wanted = min(max(entry.demand, 0), entry.max)
        if not entry.lend:
            wanted = min(max(wanted, entry.min), entry.max)
        request[entry.name] = wanted
        floor = max(scaled_min[entry.name], entry.guarantee)
        if wanted > floor:
            runtime[entry.name] = floor
            borrowers.append(entry)
        elif entry.lend:
            runtime[entry.name] = wanted
        else:
            runtime[entry.name] = floor
        pool -= runtime[entry.name]

    for tier in sorted({b.tier for b in borrowers}):
        hungry = [b for b in borrowers if b.tier == tier]
        pool = _redistribute(pool, hungry, runtime, request)
    return runtime


def _redistribute(
    pool: int, borrowers: list[ShareInput], runtime: dict[str, int], request: dict[str, int]
) -> int:
    """Step 2 for one borrow tier: hand `pool` out by weight until it or the borrowers run out (in
    place on `runtime`); returns what is left for the next tier."""
    while pool > 0 and borrowers:
        weights = [(b.name, max(b.weight, 0)) for b in borrowers]
        if sum(w for _, w in weights) <= 0:
            break
        handed = largest_remainder(pool, weights)
        pool = 0
        still_hungry = []
        for borrower in borrowers:
            name = borrower.name
            runtime[name] += handed[name]
            if runtime[name] >= request[name]:
                pool += runtime[name] - request[name]
                runtime[name] = request[name]
            else:
                still_hungry.append(borrower)
        borrowers = still_hungry
    return pool


def runtime_shares(capacity: Resources, quotas: Sequence[QuotaShareInput]) -> dict[str, Resources]:
    """The runtime share of each sibling quota on one side of a group, every dimension independently.

    Args:
        capacity: the side's capacity (see `quotas.usage.group_capacity`).
        quotas: one entry per sibling quota (unique names), with its min, max, weight and demand
            (used + pending) on this side, and whether it lends its idle min.

    Returns:
        {name: Resources}: exact integers, deterministic, independent of the order of `quotas`.
    """
    per_dimension = {
        dimension: runtime_1d(
            capacity.get(dimension),
            [
                ShareInput(
                    name=q.name,
                    min=q.min.get(dimension),
                    max=q.max.get(dimension),
                    weight=q.weight.get(dimension),
                    demand=q.demand.get(dimension),
                    lend=q.lend,
                    tier=q.tier,
                )
                for q in quotas
            ],
        )
        for dimension in DIMENSIONS
    }
    return {q.name: Resources(**{d: per_dimension[d][q.name] for d in DIMENSIONS}) for q in quotas}
