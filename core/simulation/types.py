"""Value types of the dynamic replay: timed requests and quotas in, outcomes and time series out.

Times are integer seconds on the replay's own clock (any origin); durations are seconds of running once
started. Resources use the engine's units (:mod:`core.placement.types`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from core.placement import PlacementRequest, TypicalPod

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class TimedRequest:
    """A request that arrives at ``submit`` and, once started, runs for ``duration`` seconds.

    ``team`` is the quota it counts against ('' = none); ``real_start`` is when it started in the
    recorded history, if it did (used to measure forecasts, never by the replay itself). ``gang``
    ('' = none) names the gang it belongs to: the replay starts a gang's members together, once every
    member of that gang in the replay's input has arrived, all or none (its team's quota is checked
    for the gang's total), as the service's cycle does.
    """

    request: PlacementRequest
    submit: int
    duration: int
    team: str = ""
    real_start: int | None = None
    gang: str = ""

    @property
    def request_id(self) -> str:
        return self.request.request_id


@dataclass(frozen=True, slots=True)
class TeamQuota:
    """A hard cap on the GPU compute a team may hold at once (milli, 1000 = one GPU).

    Waiting requests are ordered by their team's use of its cap (lowest first, the service's fair-share
    order), and a request that would take its team over the cap waits with :attr:`WaitReason.QUOTA`.
    """

    team: str
    max_gpu_milli: int


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How to replay: the engine policy and its seed, quotas, the node tie-break order and the horizon.

    ``horizon``: the replay stops there (default: the last submission); whatever still waits then counts
    as never started. ``typical``: FGD/Tessera's target workload (default: the replayed requests' shapes).
    ``node_priority``: tie-break priority per node (lower wins; default: node order).
    ``stop_when_idle``: stop as soon as nothing waits and nothing more arrives (when only the starts
    matter, as in a forecast) instead of releasing the remaining work up to the horizon.
    """

    policy: str = "tessera"
    seed: int = 0
    quotas: tuple[TeamQuota, ...] = ()
    horizon: int | None = None
    typical: tuple[TypicalPod, ...] | None = None
    node_priority: tuple[int, ...] | None = None
    stop_when_idle: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one request in the replay: ``start``/``end`` are ``None`` when it never started
    (``end`` is also ``None`` when it was still running at the horizon)."""

    request_id: str
    submit: int
    start: int | None
    end: int | None
    node: str | None

    @property
    def wait(self) -> int | None:
        return None if self.start is None else self.start - self.submit


@dataclass(frozen=True)
class ReplayResult:
    """The replay's outcomes (input order) and its step functions.

    ``times[k]`` is an event time; ``allocated_gpu_milli[k]``, ``queue_length[k]`` and
    ``team_gpu_milli[team][k]`` hold from ``times[k]`` until ``times[k + 1]`` (the last until ``end``).
    """

    outcomes: tuple[Outcome, ...]
    times: IntArray
    allocated_gpu_milli: IntArray
    queue_length: IntArray
    team_gpu_milli: dict[str, IntArray]
    capacity_gpu_milli: int
    start: int
    end: int
    placements: int = 0
    attempts: int = 0
    quotas: tuple[TeamQuota, ...] = field(default=())
