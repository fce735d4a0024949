"""Tessera's dynamic replay on the production engine: timed requests arrive, queue, start by the service's
order and policy, and leave; figures of a replay; estimated start times of waiting requests.

Pure like :mod:`core.placement` (numpy, the standard library and the engine only; no Django, clock,
environment or I/O), so the planner, the bench and later the defragmentation planner share it::

    result = replay(ClusterState.from_nodes(nodes), timed_requests, ReplayOptions(policy="tessera"))
    figures = summarize(result, timed_requests)
"""

from .forecast import DurationModel, RunningWork, StartEstimate, estimate_starts
from .metrics import (
    Summary,
    TeamShare,
    Waits,
    idle_while_waiting_pct,
    shape_label,
    summarize,
    time_weighted_mean,
    waiting_gpu_milli,
)
from .replay import CycleView, Running, replay, shape_key
from .types import Outcome, ReplayOptions, ReplayResult, TeamQuota, TimedRequest

__all__ = [
    "CycleView",
    "DurationModel",
    "Outcome",
    "ReplayOptions",
    "ReplayResult",
    "Running",
    "RunningWork",
    "StartEstimate",
    "Summary",
    "TeamQuota",
    "TeamShare",
    "TimedRequest",
    "Waits",
    "estimate_starts",
    "idle_while_waiting_pct",
    "replay",
    "shape_key",
    "shape_label",
    "summarize",
    "time_weighted_mean",
    "waiting_gpu_milli",
]
