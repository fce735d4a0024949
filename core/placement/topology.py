"""Topology-aware gangs across nodes: all of a gang's pods in one rack, block or NVLink domain.

A pool describes its cross-node topology as :class:`TopologyLevel` s, widest first (zone → block → rack →
NVLink domain), each read from a node label. :func:`domain_levels` turns the node labels of a state into
nested domain ids per level. :func:`place_gang_in_domain` places a gang that asks for co-location
(:class:`GangTopology`):

1. **levels**: from the tightest level up to the requested one (``REQUIRED``), or up to the widest and then
   the whole cluster (``PREFERRED``): a gang in one NVLink domain is also in one rack;
2. **domains of a level**: only those whose free GPU capacity covers the gang's (a lower bound: its
   ``min_available`` smallest members), best fit first: sort key *(free GPU milli of the domain, free GPU
   milli of its parent, of the parent's parent, ..., domain name)*, so a small gang fills the fullest
   domain that holds it and the large, empty domains stay free for the large gangs (fragmentation at
   the domain level, as FGD does for GPUs on a node);
3. **trial**: the members are placed in order by the policy on that domain's nodes only; a domain that
   cannot hold at least ``min_available`` of them is rolled back and the next one tried (at most
   :data:`MAX_DOMAIN_TRIALS` per level);
4. **waiting**: a ``REQUIRED`` gang no domain holds is reported ``GANG_TOPOLOGY`` with the level, the
   gang's GPUs and the largest free domain of that level (:attr:`Unplaced.largest_domain`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .placer import place_one
from .policies.base import Policy
from .state import BoolArray, ClusterState, IntArray
from .types import (
    GPU_MILLI,
    Assignment,
    GangSpec,
    PlacementRequest,
    TopologyLevel,
    TopologyMode,
    Unplaced,
    UnplacedReason,
)

#: Domains tried per level for one gang (after the capacity bound): bounds a gang's cost on a cluster
#: of thousands of racks whose free capacity looks sufficient but whose shape is not.
MAX_DOMAIN_TRIALS = 32


@dataclass(frozen=True, slots=True)
class DomainLevel:
    """The domains of one topology level.

    ``node_domain[i]``: the domain of node ``i`` (-1 when the node lacks the level's label);
    ``names[d]``: the label value of domain ``d``; ``parent[d]``: its domain one level up (-1 at the
    widest level, or when its nodes lack the label of the level above); ``internal_to_public``: the
    internal nesting ids (unnamed domains included) to domain ids.
    """

    name: str
    label_key: str
    node_domain: IntArray
    names: tuple[str, ...]
    parent: IntArray
    internal_to_public: IntArray

    @property
    def count(self) -> int:
        return len(self.names)


def domain_levels(state: ClusterState, levels: Sequence[TopologyLevel]) -> tuple[DomainLevel, ...]:
    """Nested domain ids of every node at every level (widest first), from the state's node labels.

    A node without a level's label has no domain at that level (-1: a gang asking for that level never
    lands there), and for the levels below it counts as in one unnamed domain of its parent: racks whose
    nodes carry no zone label are still racks."""
    n = len(state)
    out: list[DomainLevel] = []
    parent_of_node = np.zeros(
        n, np.int64
    )  # unnamed domains included; the cluster is domain 0 above
    for level in levels:
        col = np.zeros(n, np.int64)  # 0 = unnamed (no label); value v is names[v]
        names = [""]
        for (key, value), j in sorted(state.label_index.items()):
            if key == level.label_key:
                col[state.labels[:, j]] = len(names)
                names.append(value)
        pairs = np.stack([parent_of_node, col], axis=1)
        uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
        all_ids = inverse.reshape(-1).astype(np.int64)
        named = uniq[:, 1] > 0
        # domain ids of the named domains only (0..count-1); unnamed ones keep internal ids for nesting
        public = np.full(len(uniq), -1, np.int64)
        public[named] = np.arange(int(named.sum()), dtype=np.int64)
        node_domain = public[all_ids] if n else np.zeros(0, np.int64)
        domain_names = tuple(names[int(v)] for v in uniq[named, 1])
        parent = np.full(int(named.sum()), -1, np.int64)
        if out:
            parent = out[-1].internal_to_public[uniq[named, 0]]
        out.append(
            DomainLevel(level.name, level.label_key, node_domain, domain_names, parent, public)
        )
        parent_of_node = all_ids
    return tuple(out)


def free_gpu_milli(state: ClusterState, whole: bool) -> IntArray:
    """Per node, the GPU capacity new work may use: whole free GPUs × 1000 for whole-GPU gangs, free
    milli on healthy GPUs otherwise; 0 on a cordoned node."""
    free = state.whole_free * GPU_MILLI if whole else state.idle_milli
    out: IntArray = np.where(state.schedulable, free, 0).astype(np.int64)
    return out


def domain_free(level: DomainLevel, node_free: IntArray) -> IntArray:
    """Free GPU milli summed per domain of ``level``."""
    inside = level.node_domain >= 0
    out: IntArray = np.bincount(
        level.node_domain[inside], weights=node_free[inside], minlength=level.count
    ).astype(np.int64)
    return out


def _best_fit_order(
    levels: Sequence[DomainLevel], k: int, free: Sequence[IntArray], need: int
) -> IntArray:
    """Domains of level ``k`` with at least ``need`` free, best fit first (see the module docstring)."""
    ok = np.flatnonzero(free[k] >= need)
    if ok.size == 0:
        return ok
    keys: list[np.ndarray] = [np.array([levels[k].names[d] for d in ok])]
    ancestors = ok.copy()
    chain = []
    for up in range(k - 1, -1, -1):
        ancestors = np.where(ancestors >= 0, levels[up + 1].parent[np.maximum(ancestors, 0)], -1)
        padded = np.append(free[up], 0)  # an unnamed parent counts as 0 free
        chain.append(padded[ancestors])
    keys.extend(reversed(chain))
    keys.append(free[k][ok])
    out: IntArray = ok[np.lexsort(keys)]
    return out


def _try_domain(
    state: ClusterState,
    gang: GangSpec,
    members: Sequence[PlacementRequest],
    policy: Policy,
    prio: IntArray,
    allowed: BoolArray,
) -> tuple[list[Assignment], list[PlacementRequest]] | None:
    """Place the members on ``allowed`` nodes only: (placed, members that did not fit), or None (state
    unchanged) when fewer than ``min_available`` fit."""
    placed: list[Assignment] = []
    left: list[PlacementRequest] = []
    for r in members:
        a = place_one(state, r, policy, prio, allowed)
        if a is None:
            left.append(r)
        else:
            placed.append(a)
    if len(placed) >= gang.min_available:
        return placed, left
    for a in reversed(placed):
        state.release(a)
    return None


def gang_need_milli(gang: GangSpec, members: Sequence[PlacementRequest]) -> int:
    """A lower bound of the GPU milli the gang needs in one domain: its ``min_available`` smallest
    members."""
    sizes = sorted(r.total_gpu_milli for r in members)
    return int(sum(sizes[: max(gang.min_available, 0)]))


def place_gang_in_domain(
    state: ClusterState,
    gang: GangSpec,
    members: Sequence[PlacementRequest],
    policy: Policy,
    prio: IntArray,
    levels: Sequence[DomainLevel],
    fallback: Callable[[], tuple[list[Assignment], list[Unplaced]]],
) -> tuple[list[Assignment], list[Unplaced]]:
    """Place a gang with a :class:`GangTopology` (see the module docstring); ``fallback`` places it
    without topology (a ``PREFERRED`` gang no domain holds). Members are valid requests."""
    topo = gang.topology
    assert topo is not None
    names = [lv.name for lv in levels]
    if topo.level not in names:
        if topo.mode is TopologyMode.PREFERRED:
            return fallback()
        return [], _unplaced(
            gang, members, f"the pool has no topology level {topo.level!r}", (topo.level, "", 0)
        )
    k = names.index(topo.level)
    whole = all(r.is_whole_gpu or r.is_cpu_only for r in members)
    node_free = free_gpu_milli(state, whole)
    free = [domain_free(lv, node_free) for lv in levels]
    need = gang_need_milli(gang, members)
    last = k if topo.mode is TopologyMode.REQUIRED else 0
    for lvl in range(len(levels) - 1, last - 1, -1):
        for d in _best_fit_order(levels, lvl, free, need)[:MAX_DOMAIN_TRIALS]:
            level = levels[lvl]
            got = _try_domain(state, gang, members, policy, prio, level.node_domain == d)
            if got is not None:
                placed, left = got
                message = (
                    f"Gang {gang.gang_id} runs in {level.name} {level.names[d]} with {len(placed)} "
                    f"of {len(members)} pods (at least {gang.min_available}); this pod did not fit "
                    "there."
                )
                largest = (level.name, level.names[d], int(free[lvl][d]))
                return placed, [
                    Unplaced(
                        r.request_id, UnplacedReason.GANG_TOPOLOGY, message, largest_domain=largest
                    )
                    for r in left
                ]
    if topo.mode is TopologyMode.PREFERRED:
        return fallback()
    largest = _largest(levels[k], free[k])
    gpus = f"{need / GPU_MILLI:g} GPUs"
    if not largest[1]:
        detail = f"no node carries the {levels[k].label_key} label"
    elif largest[2] < need:
        detail = (
            f"it needs {gpus} free in one {topo.level}; the largest free {topo.level} is "
            f"{largest[1]} with {largest[2] / GPU_MILLI:g} GPUs free"
        )
    else:
        detail = (
            f"it needs {gpus}; the largest free {topo.level}, {largest[1]}, has "
            f"{largest[2] / GPU_MILLI:g} GPUs free but not on nodes that hold its pods"
        )
    return [], _unplaced(gang, members, detail, largest)


def _largest(level: DomainLevel, free: IntArray) -> tuple[str, str, int]:
    """(level, name, free milli) of the level's domain with the most free capacity (lowest id on ties)."""
    if level.count == 0:
        return (level.name, "", 0)
    d = int(np.argmax(free))
    return (level.name, level.names[d], int(free[d]))


def _unplaced(
    gang: GangSpec,
    members: Sequence[PlacementRequest],
    detail: str,
    largest: tuple[str, str, int],
) -> list[Unplaced]:
    topo = gang.topology
    assert topo is not None
    message = (
        f"Gang {gang.gang_id} requires its {len(members)} pods in one {topo.level}: {detail}. It "
        f"waits until one {topo.level} has room."
    )
    return [
        Unplaced(r.request_id, UnplacedReason.GANG_TOPOLOGY, message, largest_domain=largest)
        for r in members
    ]
