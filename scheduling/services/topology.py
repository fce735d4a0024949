"""A pool's topology levels and its domains as the cluster page shows them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.placement import TopologyLevel
from quotas.models import QuotaGroup
from scheduling.models import Gpu, PlacementGpu, Shard
from scheduling.services.snapshot import group_nodes
from scheduling.topology import pool_levels


def group_levels(group_id: int) -> tuple[TopologyLevel, ...]:
    """The topology levels of a quota group's pool (its shard's own, else TESSERA_TOPOLOGY_LEVELS)."""
    own = Shard.objects.filter(group_id=group_id).values_list("topology_levels", flat=True).first()
    return pool_levels(own)


@dataclass(frozen=True, slots=True)
class DomainRow:
    """One topology domain of a pool: its path of label values (widest first), nodes and GPUs."""

    level: str
    path: tuple[str, ...]
    nodes: int
    gpus: int
    free_gpus: int

    @property
    def depth(self) -> int:
        """How many named domains it is nested in."""
        return sum(1 for p in self.path[:-1] if p)

    @property
    def name(self) -> str:
        return self.path[-1]


#: Domains the cluster page lists per pool (the rest are counted, not listed).
MAX_DOMAIN_ROWS = 200


def domain_rows(
    levels: Sequence[TopologyLevel], nodes: Sequence[tuple[Mapping[str, Any], int, int]]
) -> tuple[list[DomainRow], int]:
    """The pool's domains, each after its parent, from ``(labels, gpus, whole free GPUs)`` per node; and
    how many more domains there are than :data:`MAX_DOMAIN_ROWS`. A node lacking a level's label is in
    no domain of that level (as in the engine, :func:`core.placement.topology.domain_levels`)."""
    totals: dict[tuple[str, ...], list[int]] = {}
    for labels, gpus, free in nodes:
        path: tuple[str, ...] = ()
        for level in levels:
            value = labels.get(level.label_key)
            path = (*path, value if isinstance(value, str) else "")
            if not path[-1]:
                continue  # no domain at this level; the levels below still nest under it
            row = totals.setdefault(path, [0, 0, 0])
            row[0] += 1
            row[1] += gpus
            row[2] += free
    ordered = sorted(totals)
    rows = [DomainRow(levels[len(p) - 1].name, p, *totals[p]) for p in ordered[:MAX_DOMAIN_ROWS]]
    return rows, max(0, len(ordered) - MAX_DOMAIN_ROWS)


@dataclass(frozen=True, slots=True)
class PoolTopology:
    """A pool (quota group) with its topology levels and its domains (see :func:`domain_rows`)."""

    pool: str
    levels: tuple[TopologyLevel, ...]
    rows: list[DomainRow]
    more: int
    unlabelled_nodes: int


def cluster_topology() -> list[PoolTopology]:
    """Every pool whose nodes carry at least its widest topology label, with its domains, nodes, GPUs
    and whole GPUs free (healthy, no share held) per domain."""
    busy = set(
        PlacementGpu.objects.filter(placement__released_at__isnull=True).values_list(
            "gpu_id", flat=True
        )
    )
    gpus: dict[int, list[int]] = {}
    for gpu_id, node_id, healthy in Gpu.objects.values_list("pk", "node_id", "healthy"):
        row = gpus.setdefault(node_id, [0, 0])
        row[0] += 1
        row[1] += int(healthy and gpu_id not in busy)
    out: list[PoolTopology] = []
    for group in QuotaGroup.objects.order_by("name"):
        levels = group_levels(group.pk)
        if not levels:
            continue
        nodes: list[tuple[Mapping[str, Any], int, int]] = []
        for n in group_nodes(group):
            total, free = gpus.get(n.pk, [0, 0])
            nodes.append((n.labels or {}, total, 0 if n.cordoned or not n.healthy else free))
        rows, more = domain_rows(levels, nodes)
        if rows:
            keys = {lv.label_key for lv in levels}
            unlabelled = sum(1 for labels, _, _ in nodes if not keys & set(labels))
            out.append(PoolTopology(group.name, levels, rows, more, unlabelled))
    return out
