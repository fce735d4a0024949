"""Where reclaim frees capacity: victims chosen node by node, so that the claimant can actually place.

The quota rules (`quotas.reclaim.reclaimable`) say which running units a request may take back; they
know shares, not nodes. Freeing 16 GPUs as one GPU on each of 16 nodes does not place a gang of two
8-GPU pods. `choose_by_node` (pure: an engine state in, a choice out) picks, pod by pod of the claimant
(largest first), the node where the fewest and least important permitted victims make room for it:

- a pod that fits in what is free (or already freed for an earlier pod) takes no victim;
- otherwise, per node, the permitted units placed on that node are released in reclaim's order (lowest
  priority, newest first) until the pod fits there, then any of them not needed is kept ("assign
  back"); the node with the lowest (highest victim priority, number of victims, GPUs freed) wins;
- a gang victim is released whole, on every node it runs on (an earlier choice may help a later pod);
- the pod is then reserved on that node, so the next pod does not count on the same room.

The permitted units come from a `Candidates` source node by node, as the nodes are tried (in batches
that double): a claimant that finds room on the first nodes does not weigh the 16,000 other units of a
full 2,000-node cluster. A list of victims known up front is such a source (`Listed`).

At the end the engine itself places the claimant on the state with the chosen victims released (the
policy, gang and topology rules of the cycle); if it cannot, or some pod found no node, the choice is
`NoFit` with the reason: nothing is stopped for nothing. The engine's plan is part of the choice: the
cycle that stops the victims at once places the claimant there in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from core.placement import (
    GPU_MILLI,
    Assignment,
    ClusterState,
    GangSpec,
    PlacementRequest,
    TopologyLevel,
    TopologyPolicy,
)
from core.placement.filters import admits_mask, feasible_mask
from core.placement.planner import plan_in_place
from core.units import milli_to_cores
from quotas.reclaim import Victim
from quotas.resources import Side


@dataclass(frozen=True, slots=True)
class NodeChoice:
    """The victims to stop (in reclaim's order), the node each claimant pod was fitted on, and the
    engine's placements of the claimant once those victims are released."""

    victims: tuple[Victim, ...]
    nodes: Mapping[str, str]
    placements: tuple[Assignment, ...] = ()


@dataclass(frozen=True, slots=True)
class NoFit:
    """No set of permitted victims lets the claimant place: the reason, with the pod that found no node."""

    reason: str


class Candidates(Protocol):
    """The units the quota rules permit a claimant to stop (`quotas.reclaim.reclaimable`), handed out
    by the nodes they run on; each unit is handed out once."""

    def floor(self) -> tuple[int, int, int]:
        """A lower bound on `_cost` without its node: (priority, units, GPU milli freed)."""
        ...

    def on(self, nodes: Sequence[str]) -> Sequence[Victim]:
        """The units not handed out yet with a member placed on one of `nodes`."""
        ...

    def rest(self) -> Sequence[Victim]:
        """Every unit not handed out yet."""
        ...


@dataclass
class Listed:
    """Candidates known up front, in reclaim's order (what `reclaimable` returns)."""

    victims: Sequence[Victim]
    running: Mapping[int, Assignment]
    _by_node: dict[str, list[int]] = field(init=False, default_factory=dict)
    _given: set[int] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        for index, victim in enumerate(self.victims):
            nodes = {self.running[w].node for w in victim.workload_ids if w in self.running}
            for node in nodes:
                self._by_node.setdefault(node, []).append(index)

    def floor(self) -> tuple[int, int, int]:
        return _floor(self.victims)

    def on(self, nodes: Sequence[str]) -> Sequence[Victim]:
        return self._hand_out(i for node in nodes for i in self._by_node.get(node, ()))

    def rest(self) -> Sequence[Victim]:
        return self._hand_out(range(len(self.victims)))

    def _hand_out(self, indices: Iterable[int]) -> list[Victim]:
        out = []
        for i in sorted(set(indices) - self._given):
            self._given.add(i)
            out.append(self.victims[i])
        return out


def _rank(victim: Victim) -> tuple[bool, int, timedelta, str, int]:
    """Reclaim's order among candidates: GPU-side units first (`reclaimable` lists a request's GPU
    side first), then `Victim.order`."""
    return (victim.side is not Side.GPU, *victim.order)


_FIRST_BATCH = 8
"""Nodes whose candidates are asked for at once, first; each later batch is twice the last."""


def choose_by_node(
    state: ClusterState,
    pods: Sequence[PlacementRequest],
    need: int,
    candidates: Sequence[Victim] | Candidates,
    running: Mapping[int, Assignment],
    *,
    gang: GangSpec | None = None,
    policy: str = "tessera",
    topology_levels: Sequence[TopologyLevel] = (),
) -> NodeChoice | NoFit:
    """Choose among `candidates` (permitted units, in reclaim's order) the victims whose release lets
    `need` of the claimant's `pods` place, node by node (see the module docstring).

    Args:
        state: the engine state with current placements applied (not mutated).
        pods: the claimant's engine requests (one workload, or a gang's pending members).
        need: how many of `pods` must place (a gang's `min_available` minus its active members; 1 alone).
        candidates: the units the quota rules permit to stop: a list in the order reclaim prefers them,
            or a source that hands them out by node.
        running: per active workload id, its placement on `state` (units without one free nothing).
        gang: the claimant's gang, for the engine's final check (all or nothing, topology).
        policy, topology_levels: the cycle's placement policy and the pool's topology.
    """
    source = Listed(candidates, running) if isinstance(candidates, Sequence) else candidates
    trial = state.copy()
    cands: list[Victim] = []
    held: list[tuple[Assignment, ...]] = []
    on_node: dict[int, list[int]] = {}

    def take(victims: Iterable[Victim]) -> None:
        for victim in victims:
            assignments = _held(victim.workload_ids, running, state.index)
            for node_name in dict.fromkeys(a.node for a in assignments):
                on_node.setdefault(trial.index[node_name], []).append(len(cands))
            cands.append(victim)
            held.append(assignments)

    # the nodes anything runs on (the only ones a candidate can be on), and those asked about
    occupied = sorted({state.index[a.node] for a in running.values() if a.node in state.index})
    asked = bytearray(len(trial))
    batch = _FIRST_BATCH
    chosen: set[int] = set()
    nodes: dict[str, str] = {}
    # The `need` cheapest pods are enough; the largest of them is fitted first.
    by_size = sorted(pods, key=lambda r: (r.gpu_count * r.gpu_milli, r.cpu_milli, r.request_id))
    targets = sorted(
        by_size[: max(need, 0)],
        key=lambda r: (-r.gpu_count * r.gpu_milli, -r.cpu_milli, r.request_id),
    )
    # The nodes a pod could use at all once every permitted victim stopped: the cordon, labels and
    # models as the engine filters them, the capacity judged by `_make_room` node by node. A pod the
    # engine also filters on more than a node's own free amounts (CPU-only work within the reserved
    # share, a restricted multi-GPU topology) is filtered on a state with every victim released, which
    # reserving pods only narrows.
    upper: ClusterState | None = None
    if any(_needs_upper(p) for p in targets):
        take(source.rest())
        asked[:] = b"\x01" * len(trial)
        upper = state.copy()
        upper.release_many(a for assignments in held for a in assignments)
    # No node can cost less than this: one unit of the lowest priority, the least GPU compute among
    # those; nodes are tried in index order (the last tie-break), so the first to reach it wins.
    floor = source.floor()
    # Per (pod shape, node, the node's version): the victims that make room there, and their cost; a
    # node's version moves when a choice releases or reserves anything on it (pods of one shape, as a
    # gang's are, look at each node once plus the nodes earlier choices touched).
    version = [0] * len(trial)
    rooms: dict[tuple[Any, ...], tuple[tuple[int, int, int, int], list[int]] | None] = {}
    for pod in targets:
        fits_now = feasible_mask(trial, pod)
        if fits_now.any():
            node_name = trial.names[int(fits_now.argmax())]
            released: list[int] = []
        else:
            best: tuple[tuple[int, int, int, int], list[int]] | None = None
            shape = (
                pod.cpu_milli,
                pod.memory_mib,
                pod.gpu_count,
                pod.gpu_milli,
                pod.gpu_memory_mib,
            )
            usable = admits_mask(trial, pod) if upper is None else feasible_mask(upper, pod)
            order = [i for i in occupied if usable[i]]
            for k, i in enumerate(order):
                if not asked[i]:
                    ask = [j for j in order[k : k + batch] if not asked[j]]
                    take(source.on([trial.names[j] for j in ask]))
                    for j in ask:
                        asked[j] = 1
                    batch *= 2
                key = (shape, i, version[i])
                if key not in rooms:
                    local = sorted(
                        (c for c in on_node.get(i, ()) if c not in chosen),
                        key=lambda c: _rank(cands[c]),
                    )
                    room = _make_room(trial, pod, i, local, held)
                    rooms[key] = None if room is None else (_cost(cands, room, i), room)
                found = rooms[key]
                if found is not None and (best is None or found[0] < best[0]):
                    best = found
                    if found[0][:3] == floor:
                        break
            if best is None:
                return NoFit(
                    f"reclaim cannot make room for pod {pod.request_id} ({_shape(pod)}): no node "
                    "has enough free or reclaimable capacity for it; nothing is reclaimed."
                )
            node_name = trial.names[best[0][3]]
            released = best[1]
        for c in released:
            for a in held[c]:
                trial.release(a)
                version[trial.index[a.node]] += 1
        version[trial.index[node_name]] += 1
        chosen.update(released)
        nodes[pod.request_id] = node_name
        reservation = _reserve(trial, pod, node_name)
        if reservation is not None:
            trial.apply(reservation)
        upper_hold = _reserve(upper, pod, node_name) if upper is not None else None
        if upper is not None and upper_hold is not None:
            upper.apply(upper_hold)
    picked = sorted(chosen, key=lambda c: _rank(cands[c]))
    placements = _engine_plan(
        state, pods, need, [held[c] for c in picked], gang, policy, topology_levels
    )
    if placements is None:
        return NoFit(
            "reclaim cannot make room for it: even with the permitted victims chosen node by node "
            "stopped, the engine would not place it; nothing is reclaimed."
        )
    return NodeChoice(tuple(cands[c] for c in picked), nodes, placements)


def _held(
    ids: Sequence[int], running: Mapping[int, Assignment], nodes: Mapping[str, int]
) -> tuple[Assignment, ...]:
    """The placements of a unit's workloads on the state (a reclaim weighs thousands of units)."""
    if len(ids) == 1:
        a = running.get(ids[0])
        return (a,) if a is not None and a.node in nodes else ()
    return tuple(running[w] for w in ids if w in running and running[w].node in nodes)


def _needs_upper(pod: PlacementRequest) -> bool:
    """Whether the engine filters `pod` on more than the free amounts `_make_room` weighs on a node."""
    return pod.is_cpu_only or (
        pod.is_whole_gpu and pod.gpu_count > 1 and pod.topology is TopologyPolicy.RESTRICTED
    )


def _floor(candidates: Sequence[Victim]) -> tuple[int, int, int]:
    """The lowest `_cost` (without its node) any room can have."""
    if not candidates:
        return (0, 0, 0)
    lowest = min(v.priority for v in candidates)
    return (lowest, 1, min(v.freed.gpu_milli for v in candidates if v.priority == lowest))


def _cost(candidates: Sequence[Victim], room: Sequence[int], i: int) -> tuple[int, int, int, int]:
    """Lowest first: the highest priority stopped, how many units, the GPU compute freed, the node."""
    return (
        max(candidates[c].priority for c in room),
        len(room),
        sum(candidates[c].freed.gpu_milli for c in room),
        i,
    )


@dataclass
class _Node:
    """One node's free CPU, memory and GPUs (compute, memory, capacity, healthy), for trial releases."""

    cpu: int
    mem: int
    gpus: list[list[int]]

    @classmethod
    def of(cls, state: ClusterState, i: int) -> _Node:
        return cls(
            int(state.cpu_free[i]),
            int(state.mem_free[i]),
            [
                [
                    int(state.gpu_free[i, j]),
                    int(state.gpu_mem_free[i, j]),
                    int(state.gpu_mem_cap[i, j]),
                    int(state.gpu_ok[i, j]),
                ]
                for j in range(int(state.gpu_count[i]))
            ],
        )

    def release(self, a: Assignment) -> None:
        self.cpu += a.cpu_milli
        self.mem += a.memory_mib
        for j in a.gpu_indices:
            gpu = self.gpus[j]
            if a.gpu_milli >= GPU_MILLI:
                gpu[0], gpu[1] = GPU_MILLI, gpu[2]
            else:
                gpu[0] += a.gpu_milli
                gpu[1] += a.gpu_memory_mib

    def fits(self, pod: PlacementRequest) -> bool:
        if self.cpu < pod.cpu_milli or self.mem < pod.memory_mib:
            return False
        if pod.gpu_count == 0:
            return True
        if pod.gpu_milli >= GPU_MILLI:
            usable = sum(1 for g in self.gpus if g[3] and g[0] == GPU_MILLI and g[1] == g[2])
        else:
            usable = sum(
                1
                for g in self.gpus
                if g[3] and g[0] >= pod.gpu_milli and g[1] >= pod.gpu_memory_mib
            )
        return usable >= pod.gpu_count


def _make_room(
    trial: ClusterState,
    pod: PlacementRequest,
    i: int,
    local: list[int],
    held: Sequence[tuple[Assignment, ...]],
) -> list[int] | None:
    """The units of `local` (in reclaim's order) whose release makes `pod` fit on node `i` of `trial`,
    the unneeded ones kept (newest choice first); None when all of them are not enough. The node's
    filters (labels, models, cordon) are the caller's; `trial` is not changed."""
    name = trial.names[i]

    def fits_without(units: Sequence[int]) -> bool:
        node = _Node.of(trial, i)
        for c in units:
            for a in held[c]:
                if a.node == name:
                    node.release(a)
        return node.fits(pod)

    released: list[int] = []
    node = _Node.of(trial, i)
    for c in local:
        for a in held[c]:
            if a.node == name:
                node.release(a)
        released.append(c)
        if node.fits(pod):
            break
    else:
        return None
    for c in reversed(released[:-1] if len(released) > 1 else ()):
        rest = [u for u in released if u != c]
        if fits_without(rest):
            released = rest
    return released


def _reserve(trial: ClusterState, pod: PlacementRequest, node_name: str) -> Assignment | None:
    """An assignment holding `pod`'s room on `node_name` (the first GPUs that fit), for the next pods."""
    i = trial.index[node_name]
    if pod.gpu_count == 0:
        gpus: tuple[int, ...] = ()
    elif pod.gpu_milli >= GPU_MILLI:
        whole = [
            j
            for j in range(int(trial.gpu_count[i]))
            if trial.gpu_ok[i, j]
            and trial.gpu_free[i, j] == GPU_MILLI
            and trial.gpu_mem_free[i, j] == trial.gpu_mem_cap[i, j]
        ]
        gpus = tuple(whole[: pod.gpu_count])
    else:
        part = [
            j
            for j in range(int(trial.gpu_count[i]))
            if trial.gpu_ok[i, j]
            and trial.gpu_free[i, j] >= pod.gpu_milli
            and trial.gpu_mem_free[i, j] >= pod.gpu_memory_mib
        ]
        gpus = tuple(part[: pod.gpu_count])
    if len(gpus) < pod.gpu_count:
        return None
    return Assignment(
        pod.request_id,
        node_name,
        gpus,
        pod.gpu_milli,
        pod.gpu_memory_mib,
        pod.cpu_milli,
        pod.memory_mib,
    )


def _engine_plan(
    state: ClusterState,
    pods: Sequence[PlacementRequest],
    need: int,
    released: Sequence[tuple[Assignment, ...]],
    gang: GangSpec | None,
    policy: str,
    topology_levels: Sequence[TopologyLevel],
) -> tuple[Assignment, ...] | None:
    """The engine's placements of `pods` once `released` are stopped; None when fewer than `need`."""
    check = state.copy()
    check.release_many(a for assignments in released for a in assignments)
    plan = plan_in_place(
        check,
        list(pods),
        policy=policy,
        gangs=[gang] if gang is not None else [],
        topology_levels=topology_levels,
    )
    return tuple(plan.placements) if len(plan.placements) >= need else None


def _shape(pod: PlacementRequest) -> str:
    if pod.gpu_count == 0:
        return f"{milli_to_cores(pod.cpu_milli):g} CPU"
    if pod.gpu_milli >= GPU_MILLI:
        return f"{pod.gpu_count} whole GPU{'s' if pod.gpu_count > 1 else ''}"
    return f"{pod.gpu_milli / GPU_MILLI:g} of a GPU"
