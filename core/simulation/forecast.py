"""Estimated start times: from the current state, the queue and the expected ends of running work,
replay forward twice (running work and queued work ending early, then late) and give each waiting
request the range between its two start times, with the reason it waits now.

Durations come from recorded history (:class:`DurationModel`): per group (a template, a team, a request
shape: the caller chooses the keys), the durations of work that already ended. A request names its groups
from the most specific to the least (``("template:7", "team:3")``); the first one with at least
:data:`MIN_SAMPLES` recorded durations is used, else every recorded duration together. The remaining time
of work that has run ``e`` seconds is a quantile of the recorded durations longer than ``e``, minus ``e``.
Work still running counts too: each running request is a duration at least as long as it has run so far
(a censored observation, Kaplan-Meier), so the long runs, which are the ones still running when the history
is read, are not missing from it. Quotas (``options.quotas``) and gangs (:attr:`TimedRequest.gang`: all
members start together) are checked at every step of both replays, as the service's cycle does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from core.placement import ClusterState, explain

from .replay import Running, replay
from .types import ReplayOptions, TimedRequest

#: Quantiles of the recorded durations for the early and the late replay.
LOW_QUANTILE, HIGH_QUANTILE = 0.1, 0.9
#: How far forward a forecast looks (seconds): a request not started by then has no upper bound.
LOOKAHEAD = 30 * 86400
#: Recorded durations a group needs before its own history is used instead of a broader one.
MIN_SAMPLES = 5

#: The duration groups of a request, most specific first (a single key is one group).
Groups = str | Sequence[str]


@dataclass(frozen=True)
class DurationModel:
    """Recorded durations (seconds) per group, and the run times so far of work still running.

    ``groups``: durations of work that ended, per group key. ``running``: per group key, how long the
    work of that group that is still running has run (each a lower bound of its duration: without them
    the long runs, which are the ones still running, would be missing from the history and every
    estimate would be too early). The fallback for a request whose groups have no history is every
    group's durations together.
    """

    groups: Mapping[str, Sequence[int]]
    running: Mapping[str, Sequence[int]] = field(default_factory=dict)
    _cache: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def with_running(self, work: Sequence[tuple[Groups, int]]) -> DurationModel:
        """This model with the run times so far (``elapsed``) of work still running added under each of
        its group keys."""
        running = {k: list(v) for k, v in self.running.items()}
        for group, elapsed in work:
            for key in _keys(group):
                running.setdefault(key, []).append(elapsed)
        return DurationModel(self.groups, {k: tuple(v) for k, v in running.items()})

    def _samples(self, group: Groups) -> tuple[np.ndarray, np.ndarray]:
        """(times, ended) sorted by time, the ended ones first among equal times: the chosen group's
        durations (``ended`` true) and the run times of its work still running (false)."""
        keys = _keys(group)
        hit = self._cache.get(keys)
        if hit is not None:
            return hit
        ended: Sequence[int] = ()
        censored: Sequence[int] = ()
        for key in keys:  # the first with enough history, else the one with the most
            found = self.groups.get(key) or ()
            if len(found) > len(ended):
                ended, censored = found, self.running.get(key) or ()
            if len(found) >= MIN_SAMPLES:
                break
        if not ended:
            ended = [d for values in self.groups.values() for d in values]
            censored = [d for values in self.running.values() for d in values]
        times = np.concatenate(
            [np.asarray(ended, np.int64).reshape(-1), np.asarray(censored, np.int64).reshape(-1)]
        )
        flags = np.concatenate([np.ones(len(ended), bool), np.zeros(len(censored), bool)])
        order = np.lexsort((~flags, times))
        out = (times[order], flags[order])
        self._cache[keys] = out
        return out

    def remaining(self, group: Groups, elapsed: int, quantile: float) -> int:
        """Seconds left for work of ``group`` that has run ``elapsed`` seconds, at ``quantile``.

        ``group``: one key, or keys from the most specific to the least; the first with at least
        :data:`MIN_SAMPLES` recorded durations is used, else the one with the most, else (none has
        any) every recorded duration together. The quantile is that of the durations longer than
        ``elapsed``: the plain (interpolated) quantile of the recorded ones when no work still running
        has run longer than ``elapsed`` and the shortest of them, else the Kaplan-Meier estimate that counts each running one as
        a duration at least as long as its run so far. With no such quantile (no recorded duration
        longer than ``elapsed``, or too much of the history still running): at the high quantile as
        long again as it has run or as the longest run seen, whichever is later; at the low one, one
        second."""
        times, flags = self._samples(group)
        first = int(np.searchsorted(times, elapsed, side="right"))
        times, flags = times[first:], flags[first:]
        if not flags.any():
            return (
                max(1, elapsed, int(times[-1]) - elapsed if times.size else 0)
                if (quantile >= 0.5)
                else 1
            )
        # runs still going that are shorter than every recorded duration left do not change the
        # Kaplan-Meier estimate: drop them, so that it is the plain quantile whenever it can be
        first_ended = int(np.argmax(flags))
        times, flags = times[first_ended:], flags[first_ended:]
        if flags.all():
            return max(1, int(np.quantile(times, quantile)) - elapsed)
        at_risk = times.size - np.arange(times.size)
        survival = np.cumprod(np.where(flags, 1.0 - 1.0 / at_risk, 1.0))
        reached = np.flatnonzero(flags & (1.0 - survival >= quantile - 1e-12))
        if reached.size == 0:
            return max(1, elapsed, int(times[-1]) - elapsed) if quantile >= 0.5 else 1
        return max(1, int(times[reached[0]]) - elapsed)


def _keys(group: Groups) -> tuple[str, ...]:
    return (group,) if isinstance(group, str) else tuple(group)


@dataclass(frozen=True, slots=True)
class RunningWork:
    """Placed work: the running entry as the replay takes it, when it started, its duration groups."""

    running: Running
    started: int
    group: Groups


@dataclass(frozen=True, slots=True)
class StartEstimate:
    """A waiting request's likely start: between ``earliest`` and ``latest`` (``None``: not within the
    look-ahead), and why it waits now (``position`` in the queue, 1 = next)."""

    request_id: str
    earliest: int | None
    latest: int | None
    position: int
    reason: str


def _gpus(milli: int) -> str:
    return f"{milli / 1000:g}"


def _blocking_reason(
    state: ClusterState, t: TimedRequest, held: Mapping[str, int], caps: Mapping[str, int]
) -> str:
    """Why ``t`` does not start now, as the replay would block it: its team's quota first (the
    cycle admits by quota before it looks for room), then the capacity it lacks, else the queue."""
    cap = caps.get(t.team)
    used = held.get(t.team, 0)
    if cap is not None and used + t.request.total_gpu_milli > cap:
        return (
            f"it waits for quota: its team holds {_gpus(used)} of its {_gpus(cap)}-GPU max and "
            f"this asks for {_gpus(t.request.total_gpu_milli)} more"
        )
    why = explain(state, t.request)
    return why.message if why is not None else "it fits, but requests ahead of it come first"


def estimate_starts(
    state: ClusterState,
    running: Sequence[RunningWork],
    waiting: Sequence[tuple[TimedRequest, Groups]],
    durations: DurationModel,
    now: int,
    options: ReplayOptions = ReplayOptions(),  # noqa: B008 (frozen value)
) -> dict[str, StartEstimate]:
    """Estimate when each waiting request starts, assuming nothing else arrives.

    Args:
        state: the cluster now, with ``running`` applied (never mutated).
        running: the placed work and its duration groups.
        waiting: the queue, each request with its duration groups, submitted at or before ``now``.
        durations: the recorded durations.
        now: the current time.
        options: the service's policy, seed, quotas and node priority.

    Returns:
        request id -> :class:`StartEstimate`.
    """
    bounds: list[dict[str, int | None]] = []
    horizon = now + LOOKAHEAD
    durations = durations.with_running([(w.group, now - w.started) for w in running])
    for q in (LOW_QUANTILE, HIGH_QUANTILE):
        work = [
            replace(w.running, end=now + durations.remaining(w.group, now - w.started, q))
            for w in running
        ]
        queue = [
            replace(t, submit=now, duration=durations.remaining(group, 0, q))
            for t, group in waiting
        ]
        result = replay(
            state, queue, replace(options, horizon=horizon, stop_when_idle=True), running=work
        )
        bounds.append({o.request_id: o.start for o in result.outcomes})
    caps = {q.team: q.max_gpu_milli for q in options.quotas}
    held: dict[str, int] = {}
    for w in running:
        milli = w.running.assignment.gpu_milli * len(w.running.assignment.gpu_indices)
        held[w.running.team] = held.get(w.running.team, 0) + milli
    out: dict[str, StartEstimate] = {}
    order = sorted(
        range(len(waiting)),
        key=lambda i: (-waiting[i][0].request.priority, waiting[i][0].submit, i),
    )
    for position, i in enumerate(order, start=1):
        t = waiting[i][0]
        starts = [b[t.request_id] for b in bounds]
        known = [s for s in starts if s is not None]
        earliest = min(known) if known else None
        latest = max(known) if len(known) == len(starts) else None
        blocked = _blocking_reason(state, t, held, caps)
        out[t.request_id] = StartEstimate(
            t.request_id,
            earliest,
            latest,
            position,
            f"{position - 1} ahead in the queue; {blocked}",
        )
    return out
