"""Safe defragmentation: which running workloads to move, and where, so that waiting work can start.

Input: the cluster state, the waiting requests in queue order, the running workloads the policy allows to move
(:class:`MoveCandidate`; filtering by policy happens in the service, the engine sees only movable ones) and the
limits of one plan (:class:`DefragLimits`). Output: a :class:`DefragPlan` — moves, the waiting requests each
freed capacity is for (:class:`Unlock`), and what the plan frees, as data and as one sentence.

Pipeline (:func:`plan_defrag`), every step on a private copy of the state:

1. ``_reserve_fitting``: waiting requests that already fit are placed as the cycle would place them, so no
   move targets capacity they are about to take and no unlock is claimed for them;
2. ``_unlock_waiting``: for each waiting request that does not fit (queue order), every node the request
   could use if its movable workloads left is costed (fewest moves, then least cost), and the cheapest few
   are tried for real: the chosen workloads are released, re-placed by the placement policy on *other* nodes
   (never on a node being freed, so CPU and memory of the moved pods are checked where they land), and the
   request must then fit the freed node; a node whose workloads cannot all be re-placed is rolled back;
   with :attr:`DefragLimits.chains`, a node whose clearing needs one workload that fits no other node is
   tried by first moving others off a landing node for it (``unlock_by_chain``);
3. ``_free_whole_gpus`` (only when nothing waits): repeatedly vacate the GPU whose clearing costs the fewest
   moves per freed card, preferring nodes closest to being empty, kept only when the cluster's count of
   whole free GPUs really rises.

Every move, per-owner count and second of cost is checked against the limits before it is kept. A workload
moves at most once per plan. :func:`apply_plan` replays a plan on a state (moves only; unlocked requests are
left to the cycle), so ``apply_plan`` then placing each :class:`Unlock` succeeds exactly as planned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .filters import feasible_mask, label_mask, model_mask, validate, whole_gpu_mask
from .fragmentation import typical_pods
from .gpu_select import best_slice_gpu, make_assignment, whole_gpus
from .placer import place_one
from .policies import POLICIES, Policy
from .state import ClusterState
from .types import GPU_MILLI, Assignment, PlacementRequest, TypicalPod

#: Nodes whose victim sets are tried for real per waiting request (the cheapest first).
NODES_TRIED_PER_REQUEST = 6
#: Nodes whose victim sets are costed per waiting request (those with the fewest GPUs to clear).
NODES_COSTED_PER_REQUEST = 48
#: Longest plan the engine builds whatever the limits say (bounded work per call).
MAX_MOVES_CAP = 200
#: Landing nodes tried per chained workload (those whose clearing for it takes the fewest moves first).
LANDINGS_TRIED_PER_CHAIN = 6

#: The reasons a plan counts in :attr:`DefragPlan.refusals`.
REFUSALS: dict[str, str] = {
    "candidate_fits_nowhere": "a movable workload fits no other node now, so it was not considered",
    "request_no_node": "a blocked request had no node it could use even if every movable workload left",
    "node_not_clearable": "a shortlisted node could not be cleared for the request by movable workloads",
    "over_limits": "clearing a node needed more moves, moves per owner or cost than the limits allow",
    "relocation_failed": "the workloads to move could not all be re-placed on other nodes",
    "request_still_blocked": "after the moves the request still did not fit the freed node",
    "chain_no_landing": "a workload that fits no other node found no node that moving others off would "
    "make room on",
}


@dataclass(frozen=True, slots=True)
class MoveCandidate:
    """A running workload that may be moved: where it is and what it holds.

    ``gpus`` are its GPU indices on ``node``; ``gpu_milli`` / ``gpu_memory_mib`` are per GPU (``gpu_milli ==
    1000`` = whole cards); ``cost_seconds`` is the estimated price of the move (checkpoint, restart);
    ``owner`` is the team or user the per-owner limit counts; ``running_seconds`` how long it has run and
    ``kind`` what it is (job, codespace), both for the service's explanations. ``gpu_models`` and
    ``node_labels`` constrain where it may land, as for a :class:`PlacementRequest`.
    """

    workload_id: str
    node: str
    gpus: tuple[int, ...]
    gpu_milli: int
    gpu_memory_mib: int
    cpu_milli: int
    memory_mib: int
    cost_seconds: int = 0
    owner: str = ""
    running_seconds: int = 0
    kind: str = ""
    gpu_models: tuple[str, ...] = ()
    node_labels: tuple[tuple[str, str], ...] = ()

    @property
    def is_whole_gpu(self) -> bool:
        return bool(self.gpus) and self.gpu_milli >= GPU_MILLI

    def request(self) -> PlacementRequest:
        """The workload as a request to place elsewhere."""
        if not self.gpus:
            return PlacementRequest(
                self.workload_id, self.cpu_milli, self.memory_mib, node_labels=self.node_labels
            )
        return PlacementRequest(
            self.workload_id,
            self.cpu_milli,
            self.memory_mib,
            len(self.gpus),
            min(self.gpu_milli, GPU_MILLI),
            0 if self.is_whole_gpu else self.gpu_memory_mib,
            self.gpu_models,
            self.node_labels,
        )

    def assignment(self, state: ClusterState) -> Assignment:
        """Its current assignment (whole cards carry the memory of the card, as the placer records it)."""
        mem = self.gpu_memory_mib
        if self.is_whole_gpu:
            i = state.index[self.node]
            mem = int(min(int(state.gpu_mem_cap[i, j]) for j in self.gpus))
        return Assignment(
            self.workload_id,
            self.node,
            self.gpus,
            min(self.gpu_milli, GPU_MILLI) if self.gpus else 0,
            mem if self.gpus else 0,
            self.cpu_milli,
            self.memory_mib,
        )


@dataclass(frozen=True, slots=True)
class DefragLimits:
    """Bounds of one plan: moves in total and per owner, total and per-move cost (seconds)."""

    max_moves: int = 5
    max_moves_per_owner: int = 2
    max_total_cost_seconds: int = 3600
    max_cost_seconds_per_move: int = 1800
    #: Allow a chain: a workload that fits no other node moves onto a node others are first moved off
    #: (off by default: on the openb replay it rarely unlocked anything and cost 2-4x the planning CPU).
    chains: bool = False


@dataclass(frozen=True, slots=True)
class Move:
    """Move one workload from ``from_node``/``from_gpus`` to ``to_node``/``to_gpus``.

    The amounts are the workload's (per GPU for GPU compute and memory) so the move can be replayed on a
    state alone; :meth:`source` and :meth:`target` are the two assignments.
    """

    workload_id: str
    from_node: str
    from_gpus: tuple[int, ...]
    to_node: str
    to_gpus: tuple[int, ...]
    cost_seconds: int
    owner: str
    gpu_milli: int
    gpu_memory_mib: int
    target_gpu_memory_mib: int
    cpu_milli: int
    memory_mib: int

    def source(self) -> Assignment:
        return Assignment(
            self.workload_id,
            self.from_node,
            self.from_gpus,
            self.gpu_milli,
            self.gpu_memory_mib,
            self.cpu_milli,
            self.memory_mib,
        )

    def target(self) -> Assignment:
        return Assignment(
            self.workload_id,
            self.to_node,
            self.to_gpus,
            self.gpu_milli,
            self.target_gpu_memory_mib,
            self.cpu_milli,
            self.memory_mib,
        )


@dataclass(frozen=True, slots=True)
class Unlock:
    """A waiting request that fits ``node``/``gpus`` once the plan's moves are done."""

    request_id: str
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DefragPlan:
    """The moves, what they unlock, the whole GPUs / whole GPU nodes they free (after the moves, before
    the unlocked requests start) and a sentence saying so."""

    moves: tuple[Move, ...]
    unlocks: tuple[Unlock, ...]
    freed_whole_gpus: int
    freed_whole_nodes: int
    value: str
    #: Why candidate moves were refused while planning, as ``(reason, count)`` sorted by reason (see
    #: :data:`REFUSALS`): what an operator or the bench reads when a plan is short or empty.
    refusals: tuple[tuple[str, int], ...] = ()

    @property
    def cost_seconds(self) -> int:
        return sum(m.cost_seconds for m in self.moves)


# ---------------------------------------------------------------------------------------------- helpers
class _Budget:
    """Moves, per-owner moves and cost left in the plan."""

    def __init__(self, limits: DefragLimits) -> None:
        self.moves = max(0, min(limits.max_moves, MAX_MOVES_CAP))
        self.per_owner = max(0, limits.max_moves_per_owner)
        self.cost = max(0, limits.max_total_cost_seconds)
        self.per_move = max(0, limits.max_cost_seconds_per_move)
        self.owners: dict[str, int] = {}

    def allows(self, victims: Sequence[MoveCandidate]) -> bool:
        if len(victims) > self.moves or sum(v.cost_seconds for v in victims) > self.cost:
            return False
        count: dict[str, int] = {}
        for v in victims:
            if v.cost_seconds > self.per_move:
                return False
            count[v.owner] = count.get(v.owner, 0) + 1
        return all(self.owners.get(o, 0) + c <= self.per_owner for o, c in count.items())

    def spend(self, victims: Sequence[MoveCandidate]) -> None:
        self.moves -= len(victims)
        self.cost -= sum(v.cost_seconds for v in victims)
        for v in victims:
            self.owners[v.owner] = self.owners.get(v.owner, 0) + 1


def _whole_free_total(state: ClusterState) -> int:
    return int(state.whole_free.sum())


def _consolidation(state: ClusterState) -> tuple[int, int]:
    """(whole free GPUs, sum over nodes of their square): the second rises when free cards gather on
    fewer nodes, which is what multi-GPU requests need."""
    whole = state.whole_free.astype(np.int64)
    return int(whole.sum()), int((whole * whole).sum())


def _idle_nodes(state: ClusterState) -> np.ndarray:
    """Mask of GPU nodes whose every healthy GPU is completely free."""
    healthy = state.gpu_ok.sum(axis=1)
    out: np.ndarray = state.has_gpu & (healthy > 0) & (state.whole_free == healthy)
    return out


class _Planner:
    """The working state of one :func:`plan_defrag` call."""

    def __init__(
        self,
        state: ClusterState,
        candidates: Sequence[MoveCandidate],
        limits: DefragLimits,
        policy: Policy,
    ) -> None:
        self.work = state.copy()
        self.policy = policy
        self.budget = _Budget(limits)
        self.by_node: dict[int, list[MoveCandidate]] = {}
        #: Per GPU, the compute and memory the remaining candidates hold (what their leaving would free).
        self.movable_milli = np.zeros(state.gpu_free.shape, np.int64)
        self.movable_mem = np.zeros(state.gpu_free.shape, np.int64)
        #: Per GPU, how many of the remaining candidates sit on it (the moves clearing it costs).
        self.movable_count = np.zeros(state.gpu_free.shape, np.int64)
        ids: set[str] = set()
        cpu_claim = np.zeros(len(state), np.int64)
        mem_claim = np.zeros(len(state), np.int64)
        for c in candidates:
            if c.workload_id in ids:
                raise ValueError(f"duplicate move candidate {c.workload_id!r}")
            ids.add(c.workload_id)
            i = state.index.get(c.node)
            if i is None:
                raise ValueError(f"move candidate {c.workload_id!r} is on unknown node {c.node!r}")
            if len(set(c.gpus)) != len(c.gpus) or any(
                not 0 <= j < state.gpu_count[i] for j in c.gpus
            ):
                raise ValueError(f"move candidate {c.workload_id!r} names GPUs {c.node} lacks")
            if min(c.cpu_milli, c.memory_mib, c.gpu_milli, c.gpu_memory_mib) < 0:
                raise ValueError(f"move candidate {c.workload_id!r} has negative amounts")
            if c.gpus and c.gpu_milli == 0:
                raise ValueError(f"move candidate {c.workload_id!r} holds GPUs but no compute")
            self._account(i, c, +1)
            cpu_claim[i] += c.cpu_milli
            mem_claim[i] += c.memory_mib
            self.by_node.setdefault(i, []).append(c)
        over = (
            (state.gpu_free + self.movable_milli > GPU_MILLI).any(axis=1)
            | (state.gpu_mem_free + self.movable_mem > state.gpu_mem_cap).any(axis=1)
            | (state.cpu_free + cpu_claim > state.cpu_cap)
            | (state.mem_free + mem_claim > state.mem_cap)
        )
        if over.any():
            name = state.names[int(np.flatnonzero(over)[0])]
            raise ValueError(f"move candidates on {name} claim more than is allocated there")
        self.moves: list[Move] = []
        self.unlocks: list[Unlock] = []
        #: Nodes being freed: moved workloads never land there.
        self.protected: set[int] = set()
        #: Nodes a waiting request was planned on: nothing more is taken from them.
        self.unlocked: set[int] = set()
        self.refused: dict[str, int] = {}
        #: Per node, the candidates that fitted no other node when planning began (moved only by a chain).
        self.stuck: dict[int, list[MoveCandidate]] = {}
        self.chains = limits.chains

    def refuse(self, reason: str, n: int = 1) -> None:
        """Count ``n`` refusals for ``reason`` (a key of :data:`REFUSALS`)."""
        if n > 0:
            self.refused[reason] = self.refused.get(reason, 0) + n

    def _account(self, i: int, c: MoveCandidate, sign: int) -> None:
        for j in c.gpus:
            self.movable_count[i, j] += sign
            if c.is_whole_gpu:
                self.movable_milli[i, j] += sign * GPU_MILLI
                self.movable_mem[i, j] += sign * int(self.work.gpu_mem_cap[i, j])
            else:
                self.movable_milli[i, j] += sign * c.gpu_milli
                self.movable_mem[i, j] += sign * c.gpu_memory_mib

    def _clearable(self) -> np.ndarray:
        """Per GPU: healthy and completely free once the remaining candidates on it leave."""
        w = self.work
        out: np.ndarray = (
            w.gpu_ok
            & (w.gpu_free + self.movable_milli == GPU_MILLI)
            & (w.gpu_mem_free + self.movable_mem == w.gpu_mem_cap)
        )
        return out

    def _shortlist(self, r: PlacementRequest) -> list[int]:
        """Nodes worth costing for ``r``: they pass its static filters, and once their candidates leave
        they would hold it (GPU and CPU/memory); fewest GPUs to clear first, at most
        :data:`NODES_COSTED_PER_REQUEST`."""
        w = self.work
        m = (
            feasible_mask_static(w, r) & w.has_gpu
            if not r.is_cpu_only
            else feasible_mask_static(w, r)
        )
        cpu_room = w.cpu_free.copy()
        mem_room = w.mem_free.copy()
        for i, cands in self.by_node.items():
            cpu_room[i] += sum(c.cpu_milli for c in cands)
            mem_room[i] += sum(c.memory_mib for c in cands)
        m &= (cpu_room >= r.cpu_milli) & (mem_room >= r.memory_mib)
        if self.unlocked:
            m[sorted(self.unlocked)] = False
        has = np.zeros(len(w), np.bool_)
        has[[i for i, c in self.by_node.items() if c]] = True
        m &= has
        if r.is_whole_gpu:
            clear = self._clearable().sum(axis=1)
            m &= clear >= r.gpu_count
            # Estimated price of a node: the moves (then the milli to re-place) of clearing its cheapest
            # ``gpu_count - whole_free`` clearable busy GPUs.
            busy = self._clearable() & ~whole_gpu_mask(w)
            big = np.int64(1 << 40)
            price = np.where(busy, self.movable_count * (1 << 20) + self.movable_milli, big)
            price.sort(axis=1)
            missing = np.clip(r.gpu_count - w.whole_free, 0, w.max_gpus)
            take = np.arange(w.max_gpus)[None, :] < missing[:, None]
            need = np.where(take, np.minimum(price, big), 0).sum(axis=1)
        elif not r.is_cpu_only:
            base = w.gpu_free + self.movable_milli
            fits = w.gpu_ok & (base >= r.gpu_milli)
            fits &= w.gpu_mem_free + self.movable_mem >= r.gpu_memory_mib
            m &= fits.any(axis=1)
            need = -w.max_free_milli
        else:
            need = -w.cpu_free
        cand = np.flatnonzero(m)
        order = cand[np.lexsort((cand, need[cand]))]
        return [int(i) for i in order[:NODES_COSTED_PER_REQUEST]]

    # ------------------------------------------------------------------ trying a set of victims
    def _relocate(self, victims: Sequence[MoveCandidate], node: int) -> list[Move] | None:
        """Release ``victims`` (all on ``node``) and re-place each elsewhere; on failure restore the
        state and return ``None``."""
        w = self.work
        sources = [v.assignment(w) for v in victims]
        for a in sources:
            w.release(a)
        blocked = sorted(self.protected | {node})
        was = w.schedulable[blocked].copy()
        w.schedulable[blocked] = False
        placed: list[Assignment] = []
        try:
            # Biggest first: the hardest to re-place goes while the most room is left.
            order = sorted(
                range(len(victims)),
                key=lambda k: (
                    -len(victims[k].gpus) * min(victims[k].gpu_milli, GPU_MILLI),
                    -victims[k].cpu_milli,
                    victims[k].workload_id,
                ),
            )
            targets: dict[int, Assignment] = {}
            for k in order:
                r = victims[k].request()
                landed = None if validate(r) is not None else place_one(w, r, self.policy)
                if landed is None:
                    break
                placed.append(landed)
                targets[k] = landed
        finally:
            w.schedulable[blocked] = was
        if len(placed) < len(victims):
            for a in reversed(placed):
                w.release(a)
            for a in sources:
                w.apply(a)
            return None
        return [
            Move(
                v.workload_id,
                v.node,
                v.gpus,
                targets[k].node,
                targets[k].gpu_indices,
                v.cost_seconds,
                v.owner,
                sources[k].gpu_milli,
                sources[k].gpu_memory_mib,
                targets[k].gpu_memory_mib,
                v.cpu_milli,
                v.memory_mib,
            )
            for k, v in enumerate(victims)
        ]

    def _undo(self, moves: Sequence[Move]) -> None:
        for m in reversed(moves):
            self.work.release(m.target())
        for m in moves:
            self.work.apply(m.source())

    def _keep(self, victims: Sequence[MoveCandidate], moves: Sequence[Move], node: int) -> None:
        self.budget.spend(victims)
        for v in victims:
            self._account(node, v, -1)
        self.moves.extend(moves)
        gone = {v.workload_id for v in victims}
        self.by_node[node] = [c for c in self.by_node.get(node, []) if c.workload_id not in gone]

    # ------------------------------------------------------------------ victim sets
    def _victims_for(self, node: int, r: PlacementRequest) -> list[MoveCandidate] | None:
        """The fewest movable workloads of ``node`` whose leaving lets ``r`` fit there (by GPU, then
        CPU and memory), or ``None`` when even all of them would not do."""
        w = self.work
        cands = self.by_node.get(node, [])
        if not cands:
            return None
        g = int(w.gpu_count[node])
        ok = w.gpu_ok[node, :g]
        free = w.gpu_free[node, :g].astype(np.int64)
        mem_free = w.gpu_mem_free[node, :g].astype(np.int64)
        mem_cap = w.gpu_mem_cap[node, :g].astype(np.int64)
        on_gpu: list[list[MoveCandidate]] = [[] for _ in range(g)]
        base_free = free.copy()
        base_mem = mem_free.copy()
        for c in cands:
            for j in c.gpus:
                if 0 <= j < g:
                    on_gpu[j].append(c)
                    if c.is_whole_gpu:
                        base_free[j] = GPU_MILLI
                        base_mem[j] = mem_cap[j]
                    else:
                        base_free[j] += c.gpu_milli
                        base_mem[j] += c.gpu_memory_mib
        chosen: dict[str, MoveCandidate] = {}
        if r.is_whole_gpu:
            whole_now = ok & (free == GPU_MILLI) & (mem_free == mem_cap)
            clearable = ok & ~whole_now & (base_free == GPU_MILLI) & (base_mem == mem_cap)
            need = r.gpu_count - int(whole_now.sum())
            if need > int(clearable.sum()):
                return None
            cleared: set[int] = set()
            gpu_order = sorted(
                np.flatnonzero(clearable).tolist(),
                key=lambda j: (
                    len(on_gpu[j]),
                    sum(c.cost_seconds for c in on_gpu[j]),
                    sum(c.gpu_milli for c in on_gpu[j]),
                    j,
                ),
            )
            for j in gpu_order:
                if len(cleared) >= need:
                    break
                if j in cleared:
                    continue
                for c in on_gpu[j]:
                    chosen[c.workload_id] = c
                cleared = {
                    k
                    for k in np.flatnonzero(clearable).tolist()
                    if all(c.workload_id in chosen for c in on_gpu[k])
                }
        elif not r.is_cpu_only:
            best: list[MoveCandidate] | None = None
            for j in range(g):
                if not ok[j] or base_free[j] < r.gpu_milli or base_mem[j] < r.gpu_memory_mib:
                    continue
                have, have_mem = int(free[j]), int(mem_free[j])
                pick: list[MoveCandidate] = []
                for c in sorted(on_gpu[j], key=lambda c: (-c.gpu_milli, c.cost_seconds)):
                    if have >= r.gpu_milli and have_mem >= r.gpu_memory_mib:
                        break
                    pick.append(c)
                    have += GPU_MILLI if c.is_whole_gpu else c.gpu_milli
                    have_mem += int(mem_cap[j]) if c.is_whole_gpu else c.gpu_memory_mib
                if best is None or len(pick) < len(best):
                    best = pick
            if best is None:
                return None
            chosen = {c.workload_id: c for c in best}
        cpu = int(w.cpu_free[node]) + sum(c.cpu_milli for c in chosen.values())
        mem = int(w.mem_free[node]) + sum(c.memory_mib for c in chosen.values())
        rest = sorted(
            (c for c in cands if c.workload_id not in chosen),
            key=lambda c: (not c.gpus, c.cpu_milli + c.memory_mib // 8),
            reverse=True,
        )
        for c in rest:
            if cpu >= r.cpu_milli and mem >= r.memory_mib:
                break
            chosen[c.workload_id] = c
            cpu += c.cpu_milli
            mem += c.memory_mib
        if cpu < r.cpu_milli or mem < r.memory_mib or not chosen:
            return None
        return sorted(chosen.values(), key=lambda c: c.workload_id)

    # ------------------------------------------------------------------ steps
    def reserve_fitting(self, waiting: Sequence[PlacementRequest]) -> list[PlacementRequest]:
        """Place the waiting requests that fit now (as the cycle will); return those that do not."""
        blocked: list[PlacementRequest] = []
        for r in waiting:
            if validate(r) is not None:
                continue
            if place_one(self.work, r, self.policy) is None:
                blocked.append(r)
        return blocked

    def drop_unplaceable(self) -> None:
        """Forget the candidates that fit no other node now (by shape): moving them cannot succeed, and
        costing nodes as if they could leave wastes the shortlist on nodes that cannot be freed."""
        masks: dict[tuple[object, ...], np.ndarray] = {}
        for i, cands in self.by_node.items():
            keep = []
            for c in cands:
                r = c.request()
                key = _shape(r)
                m = masks.get(key)
                if m is None:
                    m = (
                        feasible_mask(self.work, r)
                        if validate(r) is None
                        else np.zeros(0, np.bool_)
                    )
                    masks[key] = m
                if m.size and (int(m.sum()) - int(m[i])) > 0:
                    keep.append(c)
                else:
                    self._account(i, c, -1)
                    self.stuck.setdefault(i, []).append(c)
                    self.refuse("candidate_fits_nowhere")
            self.by_node[i] = keep

    def unlock_waiting(self, blocked: Sequence[PlacementRequest]) -> None:
        """Free a node for each blocked request in turn, cheapest node first (see the module docstring)."""
        w = self.work
        hopeless: set[tuple[object, ...]] = set()
        for r in blocked:
            if self.budget.moves <= 0:
                break
            key = _shape(r)
            if key in hopeless:
                continue
            hopeless.add(key)
            options: list[tuple[int, int, int, list[MoveCandidate]]] = []
            shortlist = self._shortlist(r)
            if not shortlist:
                self.refuse("request_no_node")
            for i in shortlist:
                victims = self._victims_for(i, r)
                if victims is None:
                    self.refuse("node_not_clearable")
                    continue
                if not self.budget.allows(victims):
                    self.refuse("over_limits")
                    continue
                options.append((len(victims), sum(v.cost_seconds for v in victims), i, victims))
            options.sort(key=lambda o: o[:3])
            unlocked = False
            for _, _, i, victims in options[:NODES_TRIED_PER_REQUEST]:
                moves = self._relocate(victims, i)
                if moves is None:
                    self.refuse("relocation_failed")
                    continue
                if not feasible_mask(w, r)[i]:
                    self._undo(moves)
                    self.refuse("request_still_blocked")
                    continue
                gpus = _gpus_for(w, i, r)
                if gpus is None:
                    self._undo(moves)
                    self.refuse("request_still_blocked")
                    continue
                a = make_assignment(w, i, r, gpus)
                w.apply(a)
                self._keep(victims, moves, i)
                self.protected.add(i)
                self.unlocked.add(i)
                self.unlocks.append(Unlock(r.request_id, w.names[i], a.gpu_indices))
                unlocked = True
                break
            if not unlocked and self.chains and self.stuck:
                unlocked = self.unlock_by_chain(r)
            if unlocked:
                hopeless.clear()

    # ------------------------------------------------------------------ chains
    def _chain_options(
        self, r: PlacementRequest
    ) -> list[tuple[int, int, int, list[MoveCandidate], MoveCandidate]]:
        """Nodes ``r`` could use if their movable workloads left, counting exactly one that fits no other
        node (the chained one) among those to move: ``(moves, cost, node, victims, chained)``, cheapest
        first. The stuck candidates are counted as movable only while the options are costed."""
        for i, cs in self.stuck.items():
            for c in cs:
                self._account(i, c, +1)
            self.by_node[i] = [*self.by_node.get(i, []), *cs]
        options = []
        try:
            for i in self._shortlist(r):
                stuck_ids = {c.workload_id for c in self.stuck.get(i, [])}
                if not stuck_ids:
                    continue  # the direct pass already tried this node
                victims = self._victims_for(i, r)
                if victims is None:
                    continue
                chained = [v for v in victims if v.workload_id in stuck_ids]
                if len(chained) != 1:
                    continue
                cost = sum(v.cost_seconds for v in victims)
                options.append((len(victims), cost, i, victims, chained[0]))
        finally:
            for i, cs in self.stuck.items():
                gone = {c.workload_id for c in cs}
                for c in cs:
                    self._account(i, c, -1)
                self.by_node[i] = [c for c in self.by_node[i] if c.workload_id not in gone]
        options.sort(key=lambda o: o[:3])
        return options

    def _place_on(self, c: MoveCandidate, node: int) -> Move | None:
        """Move ``c`` onto ``node`` itself (the state is unchanged when it does not fit there)."""
        w = self.work
        source = c.assignment(w)
        w.release(source)
        r = c.request()
        gpus = _gpus_for(w, node, r) if feasible_mask(w, r)[node] else None
        if gpus is None:
            w.apply(source)
            return None
        target = make_assignment(w, node, r, gpus)
        w.apply(target)
        return Move(
            c.workload_id,
            c.node,
            c.gpus,
            target.node,
            target.gpu_indices,
            c.cost_seconds,
            c.owner,
            source.gpu_milli,
            source.gpu_memory_mib,
            target.gpu_memory_mib,
            c.cpu_milli,
            c.memory_mib,
        )

    def unlock_by_chain(self, r: PlacementRequest) -> bool:
        """Free a node for ``r`` whose clearing needs one workload that fits no other node: first move
        movable workloads off a landing node (never onto the node being freed), move the chained workload
        there, then the node's other workloads elsewhere; everything is rolled back unless ``r`` then fits.
        Returns whether ``r`` was unlocked."""
        w = self.work
        for _, _, i, victims, chained in self._chain_options(r)[:NODES_TRIED_PER_REQUEST]:
            if not self.budget.allows(victims):
                self.refuse("over_limits")
                continue
            q = chained.request()
            landings = []
            for k in self._shortlist(q):
                if k == i or k in self.protected:
                    continue
                sub = self._victims_for(k, q)
                if sub is not None:
                    landings.append((len(sub), sum(v.cost_seconds for v in sub), k, sub))
            landings.sort(key=lambda o: o[:3])
            if not landings:
                self.refuse("chain_no_landing")
            others = [v for v in victims if v.workload_id != chained.workload_id]
            for _, _, k, sub in landings[:LANDINGS_TRIED_PER_CHAIN]:
                if not self.budget.allows([*victims, *sub]):
                    self.refuse("over_limits")
                    continue
                self.protected.add(i)
                try:
                    sub_moves = self._relocate(sub, k)
                finally:
                    self.protected.discard(i)
                if sub_moves is None:
                    self.refuse("relocation_failed")
                    continue
                hop = self._place_on(chained, k)
                if hop is None:
                    self._undo(sub_moves)
                    self.refuse("relocation_failed")
                    continue
                moves = self._relocate(others, i) if others else []
                gpus = None
                if moves is not None and feasible_mask(w, r)[i]:
                    gpus = _gpus_for(w, i, r)
                if moves is None or gpus is None:
                    if moves is not None:
                        self._undo(moves)
                    self._undo([hop])
                    self._undo(sub_moves)
                    self.refuse("relocation_failed" if moves is None else "request_still_blocked")
                    continue
                a = make_assignment(w, i, r, gpus)
                w.apply(a)
                self._keep(sub, sub_moves, k)
                self.budget.spend([chained])
                self.moves.append(hop)
                self.stuck[i] = [c for c in self.stuck[i] if c.workload_id != chained.workload_id]
                self._keep(others, moves, i)
                self.protected.add(i)
                self.unlocked.add(i)
                self.unlocks.append(Unlock(r.request_id, w.names[i], a.gpu_indices))
                return True
        return False

    def free_whole_gpus(self) -> None:
        """Vacate GPUs (fewest moves per freed card, nodes nearest to idle first) while it pays."""
        w = self.work
        failed: set[int] = set()
        while self.budget.moves > 0:
            units: list[tuple[float, int, int, int, list[MoveCandidate]]] = []
            for i in sorted(self.by_node):
                if not self.by_node[i] or i in failed:
                    continue
                g = int(w.gpu_count[i])
                ok = w.gpu_ok[i, :g]
                whole = int(w.whole_free[i])
                busy = int(ok.sum()) - whole
                if busy <= 0:
                    continue
                probe = PlacementRequest("defrag-probe", 0, 0, whole + 1, GPU_MILLI)
                victims = self._victims_for(i, probe)
                if victims is None or not self.budget.allows(victims):
                    self.refuse("node_not_clearable" if victims is None else "over_limits")
                    failed.add(i)
                    continue
                freed = {k for v in victims for k in v.gpus}
                ratio = len(victims) / max(1, len(freed))
                cost = sum(v.cost_seconds for v in victims)
                units.append((ratio, busy - len(freed), cost, i, victims))
            if not units:
                return
            units.sort(key=lambda u: u[:4])
            kept = False
            for _, _, _, i, victims in units[:NODES_TRIED_PER_REQUEST]:
                before = _consolidation(w)
                moves = self._relocate(victims, i)
                if moves is None:
                    self.refuse("relocation_failed")
                    failed.add(i)
                    continue
                now = _consolidation(w)
                if now[0] < before[0] or now[1] <= before[1]:
                    self._undo(moves)
                    failed.add(i)
                    continue
                self._keep(victims, moves, i)
                self.protected.add(i)
                kept = True
                break
            if not kept:
                return


def feasible_mask_static(state: ClusterState, r: PlacementRequest) -> np.ndarray:
    """Nodes ``r`` could use if their work left: schedulable, labels, GPU model, enough healthy GPUs, CPU
    and memory capacity."""
    m = state.schedulable & (state.cpu_cap >= r.cpu_milli) & (state.mem_cap >= r.memory_mib)
    if r.node_labels:
        m = m & label_mask(state, r.node_labels)
    if not r.is_cpu_only:
        m = m & model_mask(state, r.gpu_models)
        m = m & (state.gpu_ok.sum(axis=1) >= r.gpu_count)
    out: np.ndarray = m
    return out


def _shape(r: PlacementRequest) -> tuple[object, ...]:
    """Everything of a request its placement depends on (all but its id and priority)."""
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


def _gpus_for(state: ClusterState, i: int, r: PlacementRequest) -> tuple[int, ...] | None:
    if r.is_cpu_only:
        return ()
    if r.is_whole_gpu:
        try:
            return whole_gpus(state, i, r)
        except ValueError:
            return None
    return (best_slice_gpu(state, i, r),)


def _describe(
    state: ClusterState,
    after: ClusterState,
    plan_moves: Sequence[Move],
    unlocks: Sequence[Unlock],
    waiting: dict[str, PlacementRequest],
) -> tuple[int, int, str]:
    gpus = _whole_free_total(after) - _whole_free_total(state)
    idle_before, idle_after = _idle_nodes(state), _idle_nodes(after)
    nodes = int(idle_after.sum()) - int(idle_before.sum())
    if not plan_moves:
        return 0, 0, "No move helps: nothing can be freed within the limits."
    n = len(plan_moves)
    parts = ["1 move" if n == 1 else f"{n} moves"]
    new_idle = np.flatnonzero(idle_after & ~idle_before)
    models = sorted(
        {state.models[int(state.model_id[i])] for i in new_idle if state.model_id[i] >= 0}
    )
    verb = "frees" if n == 1 else "free"
    cards = f"{gpus} whole GPU{'s' if gpus != 1 else ''}"
    if nodes > 0:
        kind = "/".join(models) + " " if models else ""
        what = f"{nodes} whole {kind}node{'s' if nodes != 1 else ''}"
        parts.append(f"{verb} {what}" + (f" ({cards} more in all)" if gpus > 0 else ""))
    elif gpus > 0:
        parts.append(f"{verb} {cards}")
    else:
        parts.append(f"{'gathers' if n == 1 else 'gather'} free GPUs on fewer nodes")
    text = " ".join(parts)
    if unlocks:
        shapes = []
        for u in unlocks:
            r = waiting[u.request_id]
            if r.is_whole_gpu:
                shapes.append(f"the waiting {r.gpu_count}-GPU request {r.request_id}")
            elif r.is_cpu_only:
                shapes.append(f"the waiting CPU request {r.request_id}")
            else:
                shapes.append(f"the waiting {r.gpu_milli / GPU_MILLI:.2f}-GPU slice {r.request_id}")
        text += "; " + ", ".join(shapes) + " can start"
    return gpus, nodes, text + "."


# ---------------------------------------------------------------------------------------------- public
def plan_defrag(
    state: ClusterState,
    waiting: Sequence[PlacementRequest],
    candidates: Sequence[MoveCandidate],
    limits: DefragLimits = DefragLimits(),  # noqa: B008 (frozen value)
    *,
    policy: str = "tessera",
    typical: Sequence[TypicalPod] = (),
) -> DefragPlan:
    """Plan moves of ``candidates`` that let ``waiting`` requests start (or, when nothing waits, that
    free the most whole GPUs and nodes), within ``limits``; ``state`` is not modified.

    Args:
        state: the cluster now, with every candidate's current assignment applied.
        waiting: the waiting requests in queue order (unique ids; malformed ones are ignored).
        candidates: the running workloads that may move (unique ids, on nodes of ``state``).
        limits: moves in total and per owner, cost in total and per move.
        policy: placement policy that re-places moved workloads (a name of :data:`POLICIES`).
        typical: its target workload; default: the waiting requests and the candidates.

    Returns:
        The plan; empty (with a sentence saying so) when no move helps.

    Raises:
        ValueError: on duplicate candidate ids or a candidate on an unknown node.
    """
    ids = [r.request_id for r in waiting]
    if len(set(ids)) != len(ids):
        raise ValueError("waiting request ids must be unique")
    target = tuple(typical) or typical_pods([*waiting, *(c.request() for c in candidates)])
    pol = POLICIES[policy](typical=target, seed=0)
    planner = _Planner(state, candidates, limits, pol)
    blocked = planner.reserve_fitting(waiting)
    planner.drop_unplaceable()
    if waiting:
        planner.unlock_waiting(blocked)
    else:
        planner.free_whole_gpus()
    moves = tuple(planner.moves)
    unlocks = tuple(planner.unlocks)
    after = apply_plan(state, DefragPlan(moves, (), 0, 0, ""))
    gpus, nodes, text = _describe(state, after, moves, unlocks, {r.request_id: r for r in waiting})
    refusals = tuple(sorted(planner.refused.items()))
    return DefragPlan(moves, unlocks, gpus, nodes, text, refusals)


def apply_plan(state: ClusterState, plan: DefragPlan) -> ClusterState:
    """The state after the plan's moves (a copy; ``state`` is not modified). Unlocked requests are not
    placed: the cycle places them.

    Raises:
        ValueError: when a move does not match ``state`` (its source is not held, or its target is taken).
    """
    out = state.copy()
    for m in plan.moves:
        out.release(m.source())
    for m in plan.moves:
        out.apply(m.target())
    return out
