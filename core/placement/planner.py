"""``plan_placements``: a batch of requests (and gangs) in, a plan out; the input state is never mutated.

Order: priority descending, then input order (a stable sort). A gang is placed when its first member (in
that order) comes up: all its members are tried in order, and either at least ``min_available`` of them are
placed (kept) or every one is rolled back and reported ``GANG_INCOMPLETE`` with the blocking reason. A
gang with a ``topology`` is placed inside one domain of the pool's ``topology_levels`` (:mod:`.topology`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .explain import explain
from .filters import validate
from .fragmentation import typical_pods
from .placer import place_one
from .policies import POLICIES, Policy
from .state import ClusterState
from .topology import DomainLevel, domain_levels, place_gang_in_domain
from .types import (
    Assignment,
    GangSpec,
    PlacementPlan,
    PlacementRequest,
    TopologyLevel,
    TypicalPod,
    Unplaced,
    UnplacedReason,
)


def queue_key(priority: int, *then: object) -> tuple[object, ...]:
    """The sort key of a request in a queue: the highest ``priority`` first, then ``then`` ascending
    (the service's cycle and the replay: fair-share ratio, share ratio, submission, id). The planner,
    the cycle's decide step and the replay all order by it, so the three cannot drift apart.

    Args:
        priority: the request's priority (higher first).
        then: the tie-breakers, in order, each ascending.

    Returns:
        A tuple to sort on (ascending).
    """
    return (-priority, *then)


def order_requests(requests: Sequence[PlacementRequest]) -> list[PlacementRequest]:
    """Priority descending, then input order (a stable sort on :func:`queue_key`)."""
    return sorted(requests, key=lambda r: queue_key(r.priority))


def _shape(r: PlacementRequest) -> tuple[object, ...]:
    """Everything of a request an explanation depends on (all but its id and priority)."""
    return (
        r.cpu_milli,
        r.memory_mib,
        r.gpu_count,
        r.gpu_milli,
        r.gpu_memory_mib,
        r.gpu_models,
        r.node_labels,
        r.topology,
    )


class _Explainer:
    """Explanations memoised per request shape while the state does not change: a queue of hundreds of
    identical requests that do not fit costs one pass over the nodes, not one per request."""

    def __init__(self) -> None:
        self.memo: dict[tuple[object, ...], Unplaced] = {}

    def changed(self) -> None:
        self.memo.clear()

    def __call__(self, state: ClusterState, r: PlacementRequest) -> Unplaced:
        key = _shape(r)
        u = self.memo.get(key)
        if u is None:
            u = explain(state, r)
            if u is None:  # feasible but the policy found no node: cannot happen, kept as data
                u = Unplaced(r.request_id, UnplacedReason.INSUFFICIENT_GPU, "No node was chosen.")
            self.memo[key] = u
        return dataclasses.replace(u, request_id=r.request_id)


def _place_gang(
    state: ClusterState,
    gang: GangSpec,
    members: list[PlacementRequest],
    policy: Policy,
    prio: np.ndarray,
    why: _Explainer,
    levels: tuple[DomainLevel, ...] = (),
) -> tuple[list[Assignment], list[Unplaced]]:
    """Place a gang all-or-nothing (at least ``min_available`` members), inside one topology domain when
    it asks for one."""
    if gang.topology is not None and not any(validate(r) for r in members):
        why.changed()
        return place_gang_in_domain(
            state,
            gang,
            members,
            policy,
            prio,
            levels,
            lambda: _place_gang(
                state, dataclasses.replace(gang, topology=None), members, policy, prio, why
            ),
        )
    placed: list[Assignment] = []
    failed: list[Unplaced] = []
    for r in members:
        problem = validate(r)
        a = None if problem else place_one(state, r, policy, prio)
        if a is None:
            failed.append(why(state, r))
        else:
            why.changed()
            placed.append(a)
    if len(placed) >= gang.min_available:
        return placed, failed
    for a in reversed(placed):
        state.release(a)
    if placed:
        why.changed()
    block = failed[0] if failed else None
    detail = f"{block.request_id}: {block.message}" if block else "too few members"
    out = [
        Unplaced(
            r.request_id,
            UnplacedReason.GANG_INCOMPLETE,
            f"Gang {gang.gang_id} needs {gang.min_available} of {len(members)} members placed, only "
            f"{len(placed)} fit; blocked by {detail}",
            block.failed_constraints if block else (),
            block.largest_fitting_slice if block else None,
        )
        for r in members
    ]
    return [], out


def plan_placements(
    state: ClusterState,
    requests: Sequence[PlacementRequest],
    *,
    policy: str = "tessera",
    gangs: Sequence[GangSpec] = (),
    seed: int = 0,
    typical: Sequence[TypicalPod] = (),
    node_priority: Sequence[int] | None = None,
    topology_levels: Sequence[TopologyLevel] = (),
) -> PlacementPlan:
    """Place a batch of requests on a copy of ``state``.

    Args:
        state: the cluster now (not modified).
        requests: what to place (unique ``request_id``).
        policy: a name of :data:`POLICIES`.
        gangs: all-or-nothing groups of request ids.
        seed: seed of the random policy.
        typical: target workload for FGD/Tessera; default: the batch itself.
        node_priority: tie-break priority per node (lower wins); default: node order.
        topology_levels: the pool's cross-node topology, widest first (gangs with a ``topology``).

    Returns:
        The plan; every request is placed or listed as unplaced exactly once.
    """
    return plan_in_place(
        state.copy(),
        requests,
        policy=policy,
        gangs=gangs,
        seed=seed,
        typical=typical,
        node_priority=node_priority,
        topology_levels=topology_levels,
    )


def plan_in_place(
    work: ClusterState,
    requests: Sequence[PlacementRequest],
    *,
    policy: str = "tessera",
    gangs: Sequence[GangSpec] = (),
    seed: int = 0,
    typical: Sequence[TypicalPod] = (),
    node_priority: Sequence[int] | None = None,
    topology_levels: Sequence[TopologyLevel] = (),
) -> PlacementPlan:
    """:func:`plan_placements` on ``work`` itself: the plan's placements are applied to it (a caller
    that keeps a state in step with committed plans adopts ``work`` instead of applying them again).
    Same arguments and result as :func:`plan_placements`."""
    ids = [r.request_id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError("request ids must be unique")
    target = tuple(typical) or typical_pods(requests)
    pol = POLICIES[policy](typical=target, seed=seed)
    prio = (
        np.arange(len(work), dtype=np.int64)
        if node_priority is None
        else np.asarray(node_priority, np.int64)
    )
    by_id = {r.request_id: r for r in requests}
    gang_of: dict[str, GangSpec] = {}
    for g in gangs:
        for rid in g.request_ids:
            if rid in by_id:
                gang_of[rid] = g
    ordered = order_requests(requests)
    members_of: dict[int, list[PlacementRequest]] = {}
    for r in ordered:
        owner = gang_of.get(r.request_id)
        if owner is not None:
            members_of.setdefault(id(owner), []).append(r)
    levels = (
        domain_levels(work, topology_levels)
        if topology_levels and any(g.topology is not None for g in gangs)
        else ()
    )
    why = _Explainer()
    placements: list[Assignment] = []
    unplaced: list[Unplaced] = []
    done: set[str] = set()
    for r in ordered:
        if r.request_id in done:
            continue
        gang = gang_of.get(r.request_id)
        if gang is not None:
            members = members_of[id(gang)]
            done.update(m.request_id for m in members)
            ok, bad = _place_gang(work, gang, members, pol, prio, why, levels)
            placements.extend(ok)
            unplaced.extend(bad)
            continue
        done.add(r.request_id)
        problem = validate(r)
        if problem is not None:
            unplaced.append(why(work, r))
            continue
        a = place_one(work, r, pol, prio)
        if a is None:
            unplaced.append(why(work, r))
        else:
            why.changed()
            placements.append(a)
    assert len(placements) + len(unplaced) == len(requests)
    return PlacementPlan(tuple(placements), tuple(unplaced))
