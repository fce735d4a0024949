"""The scheduling cycle's reading of the quota tree: `quotas.usage` with the group's capacity cached.

A cycle admits through one `quotas.admission.AdmissionSession` over `cycle_snapshot(group)`: the group's
live workloads summed per quota and side (`quotas.usage.aggregated_usage`, one GROUP BY instead of
thousands of rows) and its capacity, cached per worker while the inventory it depends on is unchanged
(reading every node and GPU each cycle costs seconds on a 5,000-node cluster). The quotas' specs carry
fairness over time (decayed fair share, budgets, active loans: `quotas.usage.group_specs`), which the
decide step reads as data.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from quotas.models import QuotaGroup
from quotas.usage import (
    GroupCapacity,
    GroupSnapshot,
    WorkloadUsage,
    active_usage,
    aggregated_usage,
    build_snapshot,
    group_capacity,
    group_specs,
    live_usage,
    lowest_preemptible,
    pending_usage,
)
from scheduling.services.pool_cache import pool_cached


def _cached_capacity(group: QuotaGroup) -> GroupCapacity:
    return pool_cached(group, "capacity", lambda: group_capacity(group))


def warm_capacity(group: QuotaGroup) -> None:
    """Read the group's capacity into the worker's cache now (an idle cycle does it, so the first busy
    cycle after a start or an inventory change does not pay seconds for it on a large cluster)."""
    _cached_capacity(group)


def cycle_snapshot(group: QuotaGroup, shard_version: int | None = None) -> GroupSnapshot:
    """quotas.usage.group_snapshot for a cycle: the live workloads summed per quota and side, the capacity
    cached (see the module docstring), without the per-quota headroom the cycle does not read. With
    `shard_version`, the decayed fair-share reading is reused while the shard's version is unchanged
    (`quotas.time_inputs.cached_group_fair_shares`)."""
    return _snapshot(group, shard_version, aggregated_usage(group))


def reclaim_snapshot(group: QuotaGroup, shard_version: int | None = None) -> GroupSnapshot:
    """What a cycle's reclaim plans on, with `ReclaimRows`: the group's running work summed
    (`quotas.usage.aggregated_usage`) and its pending work one by one (`pending_usage`; the claimant
    and this cycle's placements are among it), with the capacity and the fair-share reading cached as
    in `cycle_snapshot`, so the claim is judged on the same capacity the cycle admitted against. The
    quota figures are those of the workloads one by one (`quotas/tests/test_live_usage.py`)."""
    workloads = [*aggregated_usage(group, active_only=True), *pending_usage(group)]
    return _snapshot(group, shard_version, workloads)


@dataclass(frozen=True)
class ReclaimRows:
    """`scheduling.services.decide.WorkloadRows` from the database: the group's running workloads one
    by one, for the nodes a reclaim looks at (`quotas.usage.active_usage`)."""

    group: QuotaGroup
    shard_version: int | None = None

    def active(self, ids: Collection[int], gangs: Collection[int]) -> Sequence[WorkloadUsage]:
        return active_usage(self.group, ids, gangs)

    def lowest(self, other_than: int) -> tuple[int, int] | None:
        return lowest_preemptible(self.group, other_than)

    def one_by_one(self) -> GroupSnapshot:
        return _snapshot(self.group, self.shard_version, live_usage(self.group))


def _snapshot(
    group: QuotaGroup, shard_version: int | None, workloads: Sequence[WorkloadUsage]
) -> GroupSnapshot:
    key = ("shard", shard_version) if shard_version is not None else None
    return build_snapshot(
        group_id=int(group.pk),
        group_name=group.name,
        allow_overcommitted_min=group.allow_overcommitted_min,
        capacity=_cached_capacity(group),
        specs=group_specs(group, fair_share_key=key),
        workloads=workloads,
        headroom=False,
    )
