"""Estimated start times: from the current state, the queue and the expected ends of running work,
replay forward twice (running work and queued work ending early, then late) and give each waiting
request the range between its two start times, with the reason it waits now.

Durations come from recorded history (:class:`DurationModel`): per group (a template, a team, a request
shape: the caller chooses the key), the durations of work that already ended. The remaining time of work
that has run ``e`` seconds is a quantile of the recorded durations longer than ``e``, minus ``e``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from scheduling.engine import ClusterState, explain

from .replay import Running, replay
from .types import ReplayOptions, TimedRequest

#: Quantiles of the recorded durations for the early and the late replay.
LOW_QUANTILE, HIGH_QUANTILE = 0.1, 0.9
#: How far forward a forecast looks (seconds): a request not started by then has no upper bound.
LOOKAHEAD = 30 * 86400


@dataclass(frozen=True)
class DurationModel:
    """Recorded durations (seconds) per group; ``fallback`` is every group's durations together."""

    groups: Mapping[str, Sequence[int]]

    def _samples(self, group: str) -> np.ndarray:
        samples = self.groups.get(group)
        if not samples:
            samples = [d for values in self.groups.values() for d in values]
        return np.sort(np.asarray(samples, np.int64))

    def remaining(self, group: str, elapsed: int, quantile: float) -> int:
        """Seconds left for work of ``group`` that has run ``elapsed`` seconds, at ``quantile``.

        With no recorded duration longer than ``elapsed``: as long again as it has run (at the high
        quantile) or one second (at the low one)."""
        samples = self._samples(group)
        longer = samples[samples > elapsed]
        if longer.size == 0:
            return max(1, elapsed) if quantile >= 0.5 else 1
        return max(1, int(np.quantile(longer, quantile)) - elapsed)


@dataclass(frozen=True, slots=True)
class RunningWork:
    """Placed work: the running entry as the replay takes it, when it started, its duration group."""

    running: Running
    started: int
    group: str


@dataclass(frozen=True, slots=True)
class StartEstimate:
    """A waiting request's likely start: between ``earliest`` and ``latest`` (``None``: not within the
    look-ahead), and why it waits now (``position`` in the queue, 1 = next)."""

    request_id: str
    earliest: int | None
    latest: int | None
    position: int
    reason: str


def estimate_starts(
    state: ClusterState,
    running: Sequence[RunningWork],
    waiting: Sequence[tuple[TimedRequest, str]],
    durations: DurationModel,
    now: int,
    options: ReplayOptions = ReplayOptions(),  # noqa: B008 (frozen value)
) -> dict[str, StartEstimate]:
    """Estimate when each waiting request starts, assuming nothing else arrives.

    Args:
        state: the cluster now, with ``running`` applied (never mutated).
        running: the placed work and its duration group.
        waiting: the queue, each request with its duration group, submitted at or before ``now``.
        durations: the recorded durations.
        now: the current time.
        options: the service's policy, seed, quotas and node priority.

    Returns:
        request id -> :class:`StartEstimate`.
    """
    bounds: list[dict[str, int | None]] = []
    horizon = now + LOOKAHEAD
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
        why = explain(state, t.request)
        blocked = why.message if why is not None else "it fits, but requests ahead of it come first"
        out[t.request_id] = StartEstimate(
            t.request_id,
            earliest,
            latest,
            position,
            f"{position - 1} ahead in the queue; {blocked}",
        )
    return out
