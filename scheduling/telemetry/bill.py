"""A bill that adds up: the physical cost of every GPU in a period, split into parts that sum to it
exactly, to the cent (pure: Decimal arithmetic, no Django).

Per GPU model: physical cost = GPU-hours the cards existed × price per GPU-hour. It is split two ways:

* **allocation-based**: each team's allocated GPU-hours × price, the platform's own workloads
  (overhead), and what nobody held (unallocated) = the rest;
* **usage-based**: each team's used GPU-hours × price, the platform's use, what was held but idle
  (allocated − used, of everyone), and unallocated.

Amounts are exact fractions (`fractions.Fraction`: GPU-hours are milli-minutes / 60 000, a third
of an hour stays a third) until the end; then every part is rounded to the cent with the
largest-remainder method (floor each part, hand the cents left over to the parts with the largest
remainders, ties by part name), so the rounded parts sum exactly to the rounded physical cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from math import floor

CENT = Decimal("0.01")
IDLE = "(allocated but idle)"
UNALLOCATED = "(unallocated)"
OVERHEAD = "(platform overhead)"


Amount = Fraction | Decimal | int


def cents(value: Amount) -> int:
    """`value` in whole cents, half up (the rounded physical cost)."""
    return floor(Fraction(value) * 100 + Fraction(1, 2))


def largest_remainder(total: Amount, parts: Mapping[str, Amount]) -> dict[str, Decimal]:
    """`parts` rounded to the cent so that they sum exactly to `total` rounded to the cent (half up).

    Every part must be ≥ 0 and the parts must sum to `total` exactly."""
    exact = {k: Fraction(v) for k, v in parts.items()}
    if any(v < 0 for v in exact.values()):
        raise ValueError("largest_remainder: negative part")
    if sum(exact.values(), Fraction(0)) != Fraction(total):
        raise ValueError("largest_remainder: the parts do not add up to the total")
    floors = {k: floor(v * 100) for k, v in exact.items()}
    left = cents(total) - sum(floors.values())
    order = sorted(exact, key=lambda k: (-(exact[k] * 100 - floors[k]), k))
    for key in order[:left]:
        floors[key] += 1
    return {k: (Decimal(c) / 100).quantize(CENT) for k, c in floors.items()}


@dataclass(frozen=True, slots=True)
class ModelHours:
    """One GPU model in one period: GPU-hours the cards existed, and GPU-hours allocated and used
    per team (the platform's own teams among them are billed as overhead)."""

    model: str
    price_per_gpu_hour: Decimal
    physical_gpu_hours: Fraction
    allocated: Mapping[str, Fraction]
    used: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class BillLine:
    """One part of the bill for one GPU model: a team (or a pseudo-part in parentheses), its
    GPU-hours and its amount on each basis."""

    model: str
    part: str
    allocated_gpu_hours: Fraction
    allocation_charge: Decimal
    used_gpu_hours: Fraction
    usage_charge: Decimal

    @property
    def allocated_hours(self) -> Decimal:
        """Allocated GPU-hours to the thousandth (for display and export)."""
        return hours_3dp(self.allocated_gpu_hours)

    @property
    def used_hours(self) -> Decimal:
        return hours_3dp(self.used_gpu_hours)


def hours_3dp(value: Fraction) -> Decimal:
    return (Decimal(floor(value * 1000 + Fraction(1, 2))) / 1000).quantize(Decimal("0.001"))


@dataclass(frozen=True, slots=True)
class Bill:
    period: str
    currency: str
    physical_cost: Decimal
    lines: tuple[BillLine, ...]

    def total(self, basis: str) -> Decimal:
        """Sum of the lines on one basis ("allocation" or "usage"): equals `physical_cost`."""
        field = "allocation_charge" if basis == "allocation" else "usage_charge"
        return sum((getattr(line, field) for line in self.lines), Decimal("0.00"))


def _bill_model(item: ModelHours, platform: frozenset[str]) -> list[BillLine]:
    price = Fraction(item.price_per_gpu_hour)
    physical = item.physical_gpu_hours * price
    zero = Fraction(0)
    held = sum(item.allocated.values(), zero)
    if held > item.physical_gpu_hours:
        # allocation never exceeds the cards; more means the inventory shrank mid-period: scale down
        scale = item.physical_gpu_hours / held
        allocated = {k: v * scale for k, v in item.allocated.items()}
        used = {k: min(item.used.get(k, zero) * scale, allocated[k]) for k in allocated}
    else:
        allocated = dict(item.allocated)
        used = {k: min(item.used.get(k, zero), allocated[k]) for k in allocated}
    teams = sorted(k for k in allocated if k not in platform)
    overhead_alloc = sum((allocated[k] for k in allocated if k in platform), zero)
    overhead_used = sum((used[k] for k in allocated if k in platform), zero)
    held = sum(allocated.values(), zero)
    unallocated_hours = item.physical_gpu_hours - held
    idle_hours = held - sum(used.values(), zero)

    by_allocation = {k: allocated[k] * price for k in teams}
    by_allocation[OVERHEAD] = overhead_alloc * price
    by_allocation[UNALLOCATED] = physical - sum(by_allocation.values(), zero)
    by_usage = {k: used[k] * price for k in teams}
    by_usage[OVERHEAD] = overhead_used * price
    by_usage[IDLE] = idle_hours * price
    by_usage[UNALLOCATED] = physical - sum(by_usage.values(), zero)
    alloc_cents = largest_remainder(physical, by_allocation)
    usage_cents = largest_remainder(physical, by_usage)
    hours_alloc = {**{k: allocated[k] for k in teams}, OVERHEAD: overhead_alloc}
    hours_alloc[UNALLOCATED] = unallocated_hours
    hours_used = {**{k: used[k] for k in teams}, OVERHEAD: overhead_used, IDLE: idle_hours}
    lines = []
    for part in [*teams, OVERHEAD, IDLE, UNALLOCATED]:
        lines.append(
            BillLine(
                model=item.model,
                part=part,
                allocated_gpu_hours=hours_alloc.get(part, zero),
                allocation_charge=alloc_cents.get(part, Decimal("0.00")),
                used_gpu_hours=hours_used.get(part, zero),
                usage_charge=usage_cents.get(part, Decimal("0.00")),
            )
        )
    return lines


def make_bill(
    period: str, currency: str, models: Sequence[ModelHours], platform_teams: frozenset[str]
) -> Bill:
    """The bill of one period (module docstring). Per model the rounded parts sum to that model's
    rounded physical cost; the bill's physical cost is the sum of those."""
    lines: list[BillLine] = []
    total_cents = 0
    for item in sorted(models, key=lambda m: m.model):
        lines.extend(_bill_model(item, platform_teams))
        total_cents += cents(item.physical_gpu_hours * Fraction(item.price_per_gpu_hour))
    physical = (Decimal(total_cents) / 100).quantize(CENT)
    return Bill(period=period, currency=currency, physical_cost=physical, lines=tuple(lines))
