"""The dynamic replay with defragmentation: after each cycle, when the move budget allows, the engine's
:func:`~core.placement.defrag.plan_defrag` moves running work so that blocked GPU requests start.

Budget: every placement earns ``moves_per_100_placements / 100`` move tokens (at most
``max_moves_per_plan`` are kept, so moves cannot be hoarded for a burst); a plan may use the whole tokens
held; after a plan that found no move, the next waits for ``retry_after_placements`` more placements
(nothing changed enough to try again). The waiting requests given to the planner are the heads of the classes capacity refused (at most
``max_waiting``, in the service's order; over-quota ones are left out), GPU requests only; every running
request that has run at least ``min_running_seconds`` may move. The moves are applied, then each unlocked
request starts on the node and GPUs the plan freed for it (the plan's reservation), at once.

Cost of a move: the moved workload loses ``move_cost_seconds`` of progress. The replay keeps its end time
(it does not stretch departures) and reports the lost GPU-seconds instead, so the bench can quote
allocation both as held and net of that overhead.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.placement import GPU_MILLI, ClusterState, PlacementRequest, typical_pods
from core.placement.defrag import (
    DefragLimits,
    MoveCandidate,
    feasible_mask_static,
    plan_defrag,
)
from core.placement.gpu_select import make_assignment

from .replay import CAPACITY, ClassKey, Replay
from .types import ReplayOptions, ReplayResult, TimedRequest


@dataclass(frozen=True, slots=True)
class DefragOptions:
    """How the replay defragments (see the module docstring)."""

    moves_per_100_placements: float = 1.0
    max_moves_per_plan: int = 8
    move_cost_seconds: int = 60
    min_running_seconds: int = 0
    max_waiting: int = 24
    retry_after_placements: int = 100
    #: Let the planner chain two moves (:attr:`~core.placement.defrag.DefragLimits.chains`).
    chains: bool = False


@dataclass(frozen=True, slots=True)
class DefragStats:
    """What defragmentation did in one replay."""

    plans: int
    moves: int
    unlocked: int
    lost_gpu_seconds: float
    #: Over all plans: the blocked whole-GPU requests handed to the planner, and how many of them some
    #: node could hold by its free compute alone (the sum of its free slices reaches the request's cards).
    blocked_whole: int = 0
    fragment_fit_whole: int = 0
    #: Over all plans, the planner's refusals (:attr:`~core.placement.defrag.DefragPlan.refusals`).
    refusals: tuple[tuple[str, int], ...] = ()


class _DefragReplay(Replay):
    def __init__(
        self,
        state: ClusterState,
        requests: Sequence[TimedRequest],
        options: ReplayOptions,
        defrag: DefragOptions,
    ) -> None:
        super().__init__(state, requests, options, ())
        self.defrag = defrag
        self.typical = (
            tuple(options.typical)
            if options.typical is not None
            else typical_pods(t.request for t in requests)
        )
        self.index_of = {t.request_id: i for i, t in enumerate(requests)}
        self.tokens = 0.0
        self.plans = 0
        self.moves = 0
        self.unlocked = 0
        self.lost_gpu_seconds = 0.0
        self.next_try = 0
        self.blocked_whole = 0
        self.fragment_fit_whole = 0
        self.refusals: dict[str, int] = {}

    def _fits_fragments(self, r: PlacementRequest) -> bool:
        """Some usable node's free slices add up to ``r``'s whole cards (compute, GPU memory, CPU, memory)."""
        s = self.state
        m = feasible_mask_static(s, r) & s.has_gpu
        m &= (s.cpu_free >= r.cpu_milli) & (s.mem_free >= r.memory_mib)
        free = np.where(s.gpu_ok, s.gpu_free, 0).sum(axis=1)
        mem = np.where(s.gpu_ok, s.gpu_mem_free, 0).sum(axis=1)
        need_mem = r.gpu_count * r.gpu_memory_mib
        return bool((m & (free >= r.gpu_count * GPU_MILLI) & (mem >= need_mem)).any())

    def _cycle(self, now: int, candidates: list[ClassKey]) -> None:
        before = self.placements
        super()._cycle(now, candidates)
        rate = self.defrag.moves_per_100_placements / 100
        cap = max(1, self.defrag.max_moves_per_plan)
        self.tokens = min(float(cap), self.tokens + (self.placements - before) * rate)
        if self.tokens >= 1 and self.placements >= self.next_try:
            self._defragment(now)

    def _blocked_heads(self) -> list[tuple[int, ClassKey]]:
        """Heads of the classes capacity refused, GPU requests within quota, in the service's order."""
        heads = []
        for key, members in self.classes.items():
            if self.failed.get(key) != CAPACITY:
                continue
            i = members[0]
            t = self.requests[i]
            if t.request.is_cpu_only or self._over_quota(t):
                continue
            ratio = self._ratio(str(key[0])) if key[0] in self.caps else 0.0
            heads.append((-t.request.priority, ratio, t.submit, i, key))
        heads.sort(key=lambda h: h[:4])
        return [(h[3], h[4]) for h in heads[: self.defrag.max_waiting]]

    def _defragment(self, now: int) -> None:
        heads = self._blocked_heads()
        if not heads:
            return
        cands = []
        for i, (start, _) in self.running.items():
            if now - start < self.defrag.min_running_seconds:
                continue
            a = self.assignments[i]
            cands.append(
                MoveCandidate(
                    a.request_id,
                    a.node,
                    a.gpu_indices,
                    a.gpu_milli,
                    a.gpu_memory_mib if a.gpu_milli < GPU_MILLI else 0,
                    a.cpu_milli,
                    a.memory_mib,
                    cost_seconds=self.defrag.move_cost_seconds,
                    owner=self.requests[i].team,
                    running_seconds=now - start,
                    gpu_models=self.requests[i].request.gpu_models,
                    node_labels=self.requests[i].request.node_labels,
                )
            )
        moves = int(self.tokens)
        limits = DefragLimits(
            max_moves=moves,
            max_moves_per_owner=moves,
            max_total_cost_seconds=moves * self.defrag.move_cost_seconds,
            max_cost_seconds_per_move=self.defrag.move_cost_seconds,
            chains=self.defrag.chains,
        )
        waiting = [self.requests[i].request for i, _ in heads]
        for r in waiting:
            if r.is_whole_gpu:
                self.blocked_whole += 1
                self.fragment_fit_whole += self._fits_fragments(r)
        plan = plan_defrag(
            self.state, waiting, cands, limits, policy=self.options.policy, typical=self.typical
        )
        self.plans += 1
        for reason, n in plan.refusals:
            self.refusals[reason] = self.refusals.get(reason, 0) + n
        if not plan.moves:
            self.next_try = self.placements + self.defrag.retry_after_placements
            return
        for m in plan.moves:
            self.state.release(m.source())
        for m in plan.moves:
            target = m.target()
            self.state.apply(target)
            i = self.index_of[m.workload_id]
            self.assignments[i] = target
            self.node[i] = m.to_node
            self.lost_gpu_seconds += len(m.from_gpus) * m.gpu_milli / GPU_MILLI * m.cost_seconds
        self.moves += len(plan.moves)
        self.tokens -= len(plan.moves)
        key_of = dict(heads)
        for u in plan.unlocks:
            i = self.index_of[u.request_id]
            self._start_unlocked(i, key_of[i], u.node, u.gpus, now)

    def _start_unlocked(
        self, i: int, key: ClassKey, node: str, gpus: tuple[int, ...], now: int
    ) -> None:
        """Start request ``i`` (the head of class ``key``) where the plan freed room for it."""
        t = self.requests[i]
        a = make_assignment(self.state, self.state.index[node], t.request, gpus)
        self.state.apply(a)
        members = self.classes[key]
        assert members[0] == i
        members.popleft()
        self.failed.pop(key, None)
        if not members:
            del self.classes[key]
        self.placements += 1
        self.unlocked += 1
        self.start[i], self.node[i] = now, node
        end = now + max(1, t.duration)
        self.assignments[i] = a
        self.running[i] = (now, end)
        heapq.heappush(self.departures, (end, len(self.initial) + i, i))
        self._charge(t.team, t.request.total_gpu_milli)


def replay_with_defrag(
    state: ClusterState,
    requests: Sequence[TimedRequest],
    options: ReplayOptions = ReplayOptions(),  # noqa: B008 (frozen value)
    defrag: DefragOptions = DefragOptions(),  # noqa: B008 (frozen value)
) -> tuple[ReplayResult, DefragStats]:
    """:func:`~core.simulation.replay` with defragmentation (see the module docstring).

    Args:
        state: the empty cluster at the start (never mutated).
        requests: the timed requests.
        options: as for :func:`~core.simulation.replay`.
        defrag: the move budget and cost.

    Returns:
        The replay's result and what defragmentation did. Deterministic.
    """
    run = _DefragReplay(state.copy(), requests, options, defrag)
    result = run.run(options.horizon, None)
    stats = DefragStats(
        run.plans,
        run.moves,
        run.unlocked,
        run.lost_gpu_seconds,
        run.blocked_whole,
        run.fragment_fit_whole,
        tuple(sorted(run.refusals.items())),
    )
    return result, stats
