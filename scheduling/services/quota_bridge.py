"""The scheduling cycle's reading of the quota tree: `quotas.usage` with the group's capacity cached.

A cycle admits through one `quotas.admission.AdmissionSession` over `cycle_snapshot(group)`: the group's
live workloads summed per quota and side (`quotas.usage.aggregated_usage`, one GROUP BY instead of
thousands of rows) and its capacity, cached per worker while the inventory it depends on is unchanged
(reading every node and GPU each cycle costs seconds on a 5,000-node cluster). The quotas' specs carry
fairness over time (decayed fair share, budgets, active loans: `quotas.usage.group_specs`), which the
decide step reads as data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db.models import Count, Max, Q

from quotas.models import QuotaGroup
from quotas.usage import (
    GroupCapacity,
    GroupSnapshot,
    WorkloadUsage,
    aggregated_usage,
    build_snapshot,
    group_capacity,
    group_specs,
    live_usage,
)
from scheduling.models import Gpu, Node

_capacity_cache: dict[int, tuple[Any, GroupCapacity]] = {}


def _inventory_fingerprint(group: QuotaGroup) -> tuple[Any, ...]:
    """Cheap summary of what the group's capacity depends on (nodes, their state, unhealthy GPUs)."""
    nodes = Node.objects.aggregate(
        n=Count("pk"),
        last=Max("updated_at"),
        off=Count("pk", filter=Q(cordoned=True) | Q(healthy=False)),
    )
    off_nodes = tuple(
        Node.objects.filter(Q(cordoned=True) | Q(healthy=False))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    bad_gpus = tuple(Gpu.objects.filter(healthy=False).order_by("pk").values_list("pk", flat=True))
    return (
        nodes["n"],
        nodes["last"],
        off_nodes,
        bad_gpus,
        Gpu.objects.count(),
        # every group's selector: a node an older group also matches is counted there, not here
        tuple(
            (pk, json.dumps(selector or {}, sort_keys=True))
            for pk, selector in QuotaGroup.objects.order_by("pk").values_list("pk", "node_selector")
        ),
    )


def _cached_capacity(group: QuotaGroup) -> GroupCapacity:
    key = _inventory_fingerprint(group)
    hit = _capacity_cache.get(group.pk)
    if hit is None or hit[0] != key:
        hit = (key, group_capacity(group))
        _capacity_cache[group.pk] = hit
    return hit[1]


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
    """What a cycle's reclaim plans on: the group's live workloads one by one (`quotas.usage.
    live_usage`), with the capacity and the fair-share reading cached as in `cycle_snapshot`, so the
    claim is judged on the same capacity the cycle admitted against."""
    return _snapshot(group, shard_version, live_usage(group))


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
