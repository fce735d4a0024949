"""Figures of a replay: time-weighted allocation and queue, waits by request shape, never started, team
shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.placement import GPU_MILLI, PlacementRequest, validate

from .types import IntArray, ReplayResult, TimedRequest

#: Wait percentiles reported, in order.
PERCENTILES = (50, 95, 99)


def shape_label(r: PlacementRequest) -> str:
    """The request-shape bucket waits are reported by: ``cpu``, ``<=25%``, ``<=50%``, ``<100%`` of one
    GPU, or ``N gpu`` for whole GPUs."""
    if r.is_cpu_only:
        return "cpu"
    if r.is_whole_gpu:
        return f"{r.gpu_count} gpu"
    if r.gpu_milli <= 250:
        return "<=25%"
    if r.gpu_milli <= 500:
        return "<=50%"
    return "<100%"


def time_weighted_mean(times: IntArray, values: IntArray, start: int, end: int) -> float:
    """Mean of the step function ``values[k]`` on ``[times[k], times[k+1])`` over ``[start, end]``
    (0 before the first time)."""
    if end <= start or times.size == 0:
        return float(values[-1]) if values.size and end <= start else 0.0
    edges = np.clip(np.append(times, end), start, end)
    widths = np.diff(edges)
    return float((values * widths).sum() / (end - start))


def waiting_gpu_milli(result: ReplayResult, requests: Sequence[TimedRequest]) -> IntArray:
    """On the grid of ``result.times``: the GPU compute the requests waiting at each time ask for
    (submitted, not started yet; a request that never started waits to the end; malformed ones, which the
    replay never tries, are left out)."""
    submit, start, gpu = [], [], []
    for t, o in zip(requests, result.outcomes, strict=True):
        if t.request.total_gpu_milli <= 0 or validate(t.request) is not None:
            continue
        submit.append(o.submit)
        start.append(np.iinfo(np.int64).max if o.start is None else o.start)
        gpu.append(t.request.total_gpu_milli)
    if not gpu:
        return np.zeros(result.times.shape, np.int64)
    g = np.asarray(gpu, np.int64)
    by_submit, by_start = np.argsort(submit, kind="stable"), np.argsort(start, kind="stable")
    arrived = np.concatenate(([0], np.cumsum(g[by_submit])))
    started = np.concatenate(([0], np.cumsum(g[by_start])))
    s_sorted, t_sorted = np.asarray(submit)[by_submit], np.asarray(start)[by_start]
    out: IntArray = (
        arrived[np.searchsorted(s_sorted, result.times, side="right")]
        - started[np.searchsorted(t_sorted, result.times, side="right")]
    )
    return out


def idle_while_waiting_pct(
    result: ReplayResult,
    requests: Sequence[TimedRequest],
    window: tuple[int, int] | None = None,
) -> float:
    """A loose upper bound, in points of time-weighted allocation over ``window``, on what any rearranging
    of running work (defragmentation) could add to ``result``: at each time the idle GPU compute, capped by
    what the waiting GPU requests ask for. It ignores GPU models, CPU, memory and request shapes, so the
    true headroom is lower; when it is small, moving work cannot raise allocation much."""
    lo, hi = window if window is not None else (result.start, result.end)
    if not result.capacity_gpu_milli:
        return 0.0
    idle = result.capacity_gpu_milli - result.allocated_gpu_milli
    usable = np.minimum(idle, waiting_gpu_milli(result, requests))
    return round(
        100 * time_weighted_mean(result.times, usable, lo, hi) / result.capacity_gpu_milli, 2
    )


@dataclass(frozen=True, slots=True)
class Waits:
    """Waits (seconds) of the requests that started, and how many of them."""

    count: int
    p50: float
    p95: float
    p99: float


def waits_of(values: Sequence[int]) -> Waits:
    if not values:
        return Waits(0, 0.0, 0.0, 0.0)
    p50, p95, p99 = (float(v) for v in np.percentile(np.asarray(values), PERCENTILES))
    return Waits(len(values), p50, p95, p99)


@dataclass(frozen=True, slots=True)
class TeamShare:
    """A team's time-weighted GPU use: in GPUs, as % of all allocated GPU and as % of its quota."""

    team: str
    gpus: float
    share_pct: float
    quota_pct: float


@dataclass(frozen=True, slots=True)
class Summary:
    """The figures of one replay (see the module docstring)."""

    requests: int
    started: int
    never_started: int
    allocation_pct: float
    queue_mean: float
    queue_max: int
    waits: Waits
    waits_by_shape: dict[str, Waits]
    never_started_by_shape: dict[str, int]
    teams: tuple[TeamShare, ...]


def summarize(
    result: ReplayResult,
    requests: Sequence[TimedRequest],
    window: tuple[int, int] | None = None,
) -> Summary:
    """The figures of ``result`` (the replay of ``requests``).

    Time-weighted figures are over ``window`` (default ``[result.start, result.end]``); waits and never
    started count every request, as of the end of the replay (its horizon)."""
    lo, hi = window if window is not None else (result.start, result.end)
    waits: list[int] = []
    by_shape: dict[str, list[int]] = {}
    never: dict[str, int] = {}
    for t, o in zip(requests, result.outcomes, strict=True):
        label = shape_label(t.request)
        by_shape.setdefault(label, [])
        if o.wait is None:
            never[label] = never.get(label, 0) + 1
        else:
            waits.append(o.wait)
            by_shape[label].append(o.wait)
    alloc = time_weighted_mean(result.times, result.allocated_gpu_milli, lo, hi)
    queue = time_weighted_mean(result.times, result.queue_length, lo, hi)
    caps = {q.team: q.max_gpu_milli for q in result.quotas}
    team_milli = {
        team: time_weighted_mean(result.times, series, lo, hi)
        for team, series in result.team_gpu_milli.items()
    }
    held = sum(team_milli.values())
    teams = tuple(
        TeamShare(
            team,
            round(milli / GPU_MILLI, 2),
            round(100 * milli / held, 2) if held else 0.0,
            round(100 * milli / caps[team], 2) if caps.get(team) else 0.0,
        )
        for team, milli in sorted(team_milli.items())
    )
    return Summary(
        requests=len(requests),
        started=len(waits),
        never_started=len(requests) - len(waits),
        allocation_pct=round(100 * alloc / result.capacity_gpu_milli, 2)
        if result.capacity_gpu_milli
        else 0.0,
        queue_mean=round(queue, 2),
        queue_max=int(result.queue_length.max()) if result.queue_length.size else 0,
        waits=waits_of(waits),
        waits_by_shape={k: waits_of(v) for k, v in sorted(by_shape.items())},
        never_started_by_shape=dict(sorted(never.items())),
        teams=teams,
    )
