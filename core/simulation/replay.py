"""The event-driven replay: requests arrive, start when the service's cycle would place them, and leave.

One loop over event times (an arrival or a departure, nothing in between, so replay time costs nothing):
at each time the departures are released, the arrivals join the queue, and one **cycle** runs, like the
service's (:mod:`scheduling.services.decide`): waiting requests in the service's order (highest
priority, then the team furthest below its quota, then the oldest submission, then input order), each
admitted by its team's quota and placed by the engine's policy if it fits; whoever does not fit keeps
waiting and later requests may still start (backfill).

Speed comes from two facts, not from skipping work: capacity only shrinks between releases, and a
request that did not fit cannot fit until a node it could use frees something. Waiting requests are kept
in classes of identical requests (team, priority, shape), each in arrival order; a cycle tries a class's
head only when the class is new, when its team freed quota (if quota refused it) or when a node freed in
this event could hold it (if capacity refused it). A cycle therefore costs one attempt per class that can
have changed, not one per waiting request, and the outcome is the one of trying every request in order.

A gang's members form one class of their own, tried as a whole: once all its members have arrived, its
team's quota is checked for their total and they are placed one after the other; if one does not fit,
the ones placed in this attempt are released and the gang waits (capacity), else they all start now.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from core.placement import (
    GPU_MILLI,
    POLICIES,
    Assignment,
    ClusterState,
    PlacementRequest,
    place_one,
    queue_key,
    typical_pods,
    validate,
)

from .types import IntArray, Outcome, ReplayOptions, ReplayResult, TimedRequest

ClassKey = tuple[object, ...]
CAPACITY, QUOTA, INCOMPLETE = "capacity", "quota", "incomplete"


def shape_key(r: PlacementRequest) -> tuple[object, ...]:
    """Everything placement depends on, except the id and the priority."""
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


@dataclass(frozen=True, slots=True)
class Running:
    """Work already placed when a replay begins: its assignment (applied to the state given to
    :func:`replay`), its team and when it ends."""

    assignment: Assignment
    end: int
    team: str = ""


@dataclass(frozen=True, slots=True)
class CycleView:
    """What an observer sees after each cycle: the time, the state (read it, do not change it), the
    running requests (index -> (start, end)) and the waiting ones in queue order (indices into the
    replay's requests)."""

    time: int
    state: ClusterState
    running: dict[int, tuple[int, int]]
    assignments: dict[int, Assignment]
    ended: tuple[int, ...]
    queue: Callable[[], tuple[int, ...]]

    def waiting(self) -> tuple[int, ...]:
        """The waiting requests in queue order (sorted on demand: call it only when needed)."""
        return self.queue()


def may_fit(state: ClusterState, r: PlacementRequest, nodes: IntArray) -> bool:
    """A necessary condition for ``r`` to fit on one of ``nodes``: CPU, memory and GPU capacity only
    (labels, models and reservations are left to the engine)."""
    ok = (
        state.schedulable[nodes]
        & (state.cpu_free[nodes] >= r.cpu_milli)
        & (state.mem_free[nodes] >= r.memory_mib)
    )
    if r.is_cpu_only or not ok.any():
        return bool(ok.any())
    gpu_ok = state.gpu_ok[nodes]
    if r.is_whole_gpu:
        whole = (gpu_ok & (state.gpu_free[nodes] == GPU_MILLI)).sum(axis=1)
        return bool((ok & (whole >= r.gpu_count)).any())
    fits = gpu_ok & (state.gpu_free[nodes] >= r.gpu_milli)
    fits &= state.gpu_mem_free[nodes] >= r.gpu_memory_mib
    return bool((ok & fits.any(axis=1)).any())


class Replay:
    """The replay's mutable state; :func:`replay` is the entry point (the defragmentation replay,
    `core.simulation.defrag`, extends it)."""

    def __init__(
        self,
        state: ClusterState,
        requests: Sequence[TimedRequest],
        options: ReplayOptions,
        running: Sequence[Running],
    ) -> None:
        self.state = state
        self.requests = requests
        self.options = options
        typical = options.typical
        if typical is None:
            typical = typical_pods(t.request for t in requests)
        self.policy = POLICIES[options.policy](typical=typical, seed=options.seed)
        if options.node_priority is None:
            self.prio = np.arange(len(state), dtype=np.int64)
        else:
            self.prio = np.asarray(options.node_priority, np.int64)
        self.caps = {q.team: q.max_gpu_milli for q in options.quotas}
        self.used: dict[str, int] = dict.fromkeys(self.caps, 0)
        self.start: list[int | None] = [None] * len(requests)
        self.node: list[str | None] = [None] * len(requests)
        self.classes: dict[ClassKey, deque[int]] = {}
        self.failed: dict[ClassKey, str] = {}
        self.departures: list[tuple[int, int, int]] = []  # (end, sequence, index or -1 - running)
        self.assignments: dict[int, Assignment] = {}
        self.initial = list(running)
        self.running: dict[int, tuple[int, int]] = {}
        self.placements = 0
        self.attempts = 0
        self.gang_size: dict[str, int] = {}
        for t in requests:
            if t.gang:
                self.gang_size[t.gang] = self.gang_size.get(t.gang, 0) + 1
        for k, work in enumerate(running):
            heapq.heappush(self.departures, (work.end, k, -1 - k))
            self._charge(work.team, work.assignment.gpu_milli * len(work.assignment.gpu_indices))

    # ---------------------------------------------------------------- quota bookkeeping
    def _charge(self, team: str, milli: int) -> None:
        if team in self.used:
            self.used[team] += milli

    def _ratio(self, team: str) -> float:
        cap = self.caps.get(team)
        return self.used[team] / cap if cap else 0.0

    def _over_quota(self, t: TimedRequest) -> bool:
        cap = self.caps.get(t.team)
        return cap is not None and self.used[t.team] + t.request.total_gpu_milli > cap

    # ---------------------------------------------------------------- events
    def _class(self, i: int) -> ClassKey:
        t = self.requests[i]
        if t.gang:
            return (t.team, -t.request.priority, "gang", t.gang)
        return (t.team, -t.request.priority, *shape_key(t.request))

    def _release(self) -> tuple[set[int], set[str], list[int]]:
        """Release every departure due at the earliest departure time; return the nodes and teams freed
        and the requests that ended."""
        when = self.departures[0][0]
        nodes: set[int] = set()
        teams: set[str] = set()
        ended: list[int] = []
        while self.departures and self.departures[0][0] == when:
            _, _, i = heapq.heappop(self.departures)
            if i < 0:
                work = self.initial[-1 - i]
                a, team = work.assignment, work.team
            else:
                a, team = self.assignments.pop(i), self.requests[i].team
                del self.running[i]
                ended.append(i)
            self.state.release(a)
            self._charge(team, -a.gpu_milli * len(a.gpu_indices))
            nodes.add(self.state.index[a.node])
            teams.add(team)
        return nodes, teams, ended

    def _candidates(self, freed_nodes: set[int], freed_teams: set[str]) -> list[ClassKey]:
        """Waiting classes whose head may start now (see the module docstring)."""
        nodes = np.array(sorted(freed_nodes), np.int64)
        out = []
        for key, members in self.classes.items():
            why = self.failed.get(key)
            if why is None:
                out.append(key)
            elif why == QUOTA and key[0] in freed_teams:
                out.append(key)
            elif why == CAPACITY and nodes.size:
                heads = members if self._is_gang(key) else (members[0],)
                if any(may_fit(self.state, self.requests[i].request, nodes) for i in heads):
                    out.append(key)
        return out

    @staticmethod
    def _is_gang(key: ClassKey) -> bool:
        return len(key) == 4 and key[2] == "gang"

    def _try_gang(self, now: int, key: ClassKey) -> str | None:
        """Start every member of the gang ``key`` now, or none; returns why not (None: started)."""
        members = self.classes[key]
        if len(members) < self.gang_size[str(key[3])]:
            return INCOMPLETE
        team = self.requests[members[0]].team
        cap = self.caps.get(team)
        total = sum(self.requests[i].request.total_gpu_milli for i in members)
        if cap is not None and self.used[team] + total > cap:
            return QUOTA
        placed: list[tuple[int, Assignment]] = []
        for i in members:
            a = place_one(self.state, self.requests[i].request, self.policy, self.prio)
            if a is None:
                for _, done in placed:
                    self.state.release(done)
                return CAPACITY
            placed.append((i, a))
        for i, a in placed:
            self._start(now, i, a)
        return None

    def _start(self, now: int, i: int, a: Assignment) -> None:
        t = self.requests[i]
        self.placements += 1
        self.start[i], self.node[i] = now, a.node
        end = now + max(1, t.duration)
        self.assignments[i] = a
        self.running[i] = (now, end)
        heapq.heappush(self.departures, (end, len(self.initial) + i, i))
        self._charge(t.team, t.request.total_gpu_milli)

    def _cycle(self, now: int, candidates: list[ClassKey]) -> None:
        """Try the candidate classes' heads in the service's order until each class fails or empties."""
        ratio = {
            key: self._ratio(str(key[0])) if key[0] in self.caps else 0.0 for key in candidates
        }
        heap = []
        for key in candidates:
            i = self.classes[key][0]
            t = self.requests[i]
            heap.append((queue_key(t.request.priority, ratio[key], t.submit, i), i, key))
        heapq.heapify(heap)
        while heap:
            _, i, key = heapq.heappop(heap)
            t = self.requests[i]
            self.attempts += 1
            if self._is_gang(key):
                why = self._try_gang(now, key)
                if why is None:
                    self.failed.pop(key, None)
                    del self.classes[key]
                else:
                    self.failed[key] = why
                continue
            if self._over_quota(t):
                self.failed[key] = QUOTA
                continue
            a = place_one(self.state, t.request, self.policy, self.prio)
            if a is None:
                self.failed[key] = CAPACITY
                continue
            self.failed.pop(key, None)
            members = self.classes[key]
            members.popleft()
            self._start(now, i, a)
            if members:
                j = members[0]
                nxt = self.requests[j]
                heapq.heappush(
                    heap, (queue_key(nxt.request.priority, ratio[key], nxt.submit, j), j, key)
                )
            else:
                del self.classes[key]

    def waiting(self) -> tuple[int, ...]:
        """Waiting indices in the service's order (as of now)."""
        keys = []
        for key, members in self.classes.items():
            r = self._ratio(str(key[0])) if key[0] in self.caps else 0.0
            for i in members:
                t = self.requests[i]
                keys.append((queue_key(t.request.priority, r, t.submit, i), i))
        return tuple(i for _, i in sorted(keys))

    def run(
        self, horizon: int | None, observer: Callable[[CycleView], None] | None
    ) -> ReplayResult:
        order = sorted(range(len(self.requests)), key=lambda i: (self.requests[i].submit, i))
        invalid = {i for i in order if validate(self.requests[i].request) is not None}
        order = [i for i in order if i not in invalid]
        first = self.requests[order[0]].submit if order else 0
        if horizon is None:
            horizon = self.requests[order[-1]].submit if order else 0
        times: list[int] = []
        alloc: list[int] = []
        queue: list[int] = []
        teams: dict[str, list[int]] = {team: [] for team in self.caps}
        waiting = 0
        k = 0
        stop_idle = self.options.stop_when_idle
        while True:
            next_arrival = self.requests[order[k]].submit if k < len(order) else None
            next_departure = self.departures[0][0] if self.departures else None
            if next_arrival is None and (next_departure is None or (waiting == 0 and stop_idle)):
                break
            now = min(x for x in (next_arrival, next_departure) if x is not None)
            if now > horizon:
                break
            freed_nodes: set[int] = set()
            freed_teams: set[str] = set()
            ended: list[int] = []
            if next_departure == now:
                freed_nodes, freed_teams, ended = self._release()
            while k < len(order) and self.requests[order[k]].submit == now:
                i = order[k]
                key = self._class(i)
                self.classes.setdefault(key, deque()).append(i)
                if self._is_gang(key):
                    self.failed.pop(key, None)  # one more member: try the gang again
                k += 1
            self._cycle(now, self._candidates(freed_nodes, freed_teams))
            waiting = sum(len(m) for m in self.classes.values())
            if times and times[-1] == now:
                times.pop(), alloc.pop(), queue.pop()
                for series in teams.values():
                    series.pop()
            times.append(now)
            alloc.append(self.state.allocated_gpu_milli)
            queue.append(waiting)
            for team, series in teams.items():
                series.append(self.used[team])
            if observer is not None:
                view = CycleView(
                    now, self.state, self.running, self.assignments, tuple(ended), self.waiting
                )
                observer(view)
        outcomes = tuple(
            Outcome(
                t.request_id,
                t.submit,
                self.start[i],
                None if self.start[i] is None else int(self.start[i] or 0) + max(1, t.duration),
                self.node[i],
            )
            for i, t in enumerate(self.requests)
        )
        return ReplayResult(
            outcomes=outcomes,
            times=np.array(times, np.int64),
            allocated_gpu_milli=np.array(alloc, np.int64),
            queue_length=np.array(queue, np.int64),
            team_gpu_milli={team: np.array(s, np.int64) for team, s in teams.items()},
            capacity_gpu_milli=int(self.state.gpu_ok.sum()) * GPU_MILLI,
            start=first,
            end=max(horizon, first),
            placements=self.placements,
            attempts=self.attempts,
            quotas=self.options.quotas,
        )


def replay(
    state: ClusterState,
    requests: Sequence[TimedRequest],
    options: ReplayOptions = ReplayOptions(),  # noqa: B008 (frozen value)
    *,
    running: Sequence[Running] = (),
    observer: Callable[[CycleView], None] | None = None,
) -> ReplayResult:
    """Replay ``requests`` over time on a copy of ``state``.

    Args:
        state: the cluster at the start (never mutated; ``running`` must already be applied to it).
        requests: the timed requests (any order; ties of submission keep input order).
        options: policy, seed, quotas, node priority, horizon (:class:`ReplayOptions`).
        running: work already placed on ``state`` and when it ends (a forecast starts from it).
        observer: called after every cycle with a :class:`CycleView`.

    Returns:
        The outcome of every request (input order) and the allocation / queue / team step functions.
        Deterministic: the same input gives the same result. Malformed requests never start.
    """
    return Replay(state.copy(), requests, options, running).run(options.horizon, observer)
