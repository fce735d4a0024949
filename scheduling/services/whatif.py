"""What-if capacity planning: replay a pool's recorded demand on its cluster as it is and as it would be
after a change (nodes of a GPU model added or removed, another policy, GPU caps per team), side by side.

Decide, then report: `plan_cluster` turns the change into the node list (pure data, `InvalidInput`
naming the field when the change cannot apply), `run_whatif` replays both (`scheduling.simulation`) and
returns figures and plot series. Nothing is stored or changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from django.conf import settings
from django.utils import timezone

from portal.errors import InvalidInput
from quotas.models import QuotaGroup
from scheduling.engine import GPU_MILLI, POLICIES, ClusterState, NodeSpec, typical_pods
from scheduling.services.demand import pool_nodes, recorded_demand, timed_requests
from scheduling.services.snapshot import reservation_policy
from scheduling.simulation import (
    ReplayOptions,
    ReplayResult,
    Summary,
    TeamQuota,
    TimedRequest,
    replay,
    summarize,
)

MAX_NODES_CHANGED = 500
#: Points per plotted series at most (the step functions are sampled on an even grid).
PLOT_POINTS = 400


@dataclass(frozen=True)
class WhatIfChange:
    """The change to try. ``team_gpus``: tenant slug -> GPUs it may hold at once (a cap)."""

    add_model: str = ""
    add_count: int = 0
    remove_model: str = ""
    remove_count: int = 0
    policy: str = ""
    team_gpus: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WhatIfRun:
    """One replay: its label, figures, nodes and GPUs, and plot series (hours, GPUs, waiting)."""

    label: str
    policy: str
    nodes: int
    gpus: int
    summary: Summary
    hours: tuple[float, ...]
    allocated_gpus: tuple[float, ...]
    waiting: tuple[int, ...]
    team_waits_p95: dict[str, float]
    team_never_started: dict[str, int]


@dataclass(frozen=True)
class WhatIfReport:
    days: int
    requests: int
    recorded_waits_p95: float
    baseline: WhatIfRun
    changed: WhatIfRun


def plan_cluster(nodes: Sequence[NodeSpec], change: WhatIfChange) -> list[NodeSpec]:
    """The node list after ``change``: added nodes copy the first node of that model; removed ones are
    the last nodes of that model. Raises InvalidInput naming the field when it cannot apply."""
    out = list(nodes)
    if change.remove_count:
        of_model = [i for i, n in enumerate(out) if n.gpu_model == change.remove_model]
        if len(of_model) < change.remove_count:
            raise InvalidInput(
                f"remove_count: the pool has {len(of_model)} nodes of {change.remove_model!r}.",
                fields={"remove_count": [f"At most {len(of_model)}."]},
            )
        drop = set(of_model[len(of_model) - change.remove_count :])
        out = [n for i, n in enumerate(out) if i not in drop]
    if change.add_count:
        template = next((n for n in nodes if n.gpu_model == change.add_model and n.gpus), None)
        if template is None:
            models = sorted({n.gpu_model for n in nodes if n.gpu_model})
            raise InvalidInput(
                f"add_model: no node of {change.add_model!r} in the pool to copy.",
                fields={"add_model": [f"One of: {', '.join(models) or 'none'}."]},
            )
        for k in range(change.add_count):
            out.append(dataclasses.replace(template, name=f"what-if-{change.add_model}-{k + 1}"))
    return out


def _series(
    result: ReplayResult, end: int
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[int, ...]]:
    grid = np.linspace(0, end, PLOT_POINTS)
    if result.times.size == 0:
        zeros = tuple(0.0 for _ in grid)
        return tuple(float(g / 3600) for g in grid), zeros, tuple(0 for _ in grid)
    at = np.searchsorted(result.times, grid, side="right") - 1
    held = np.where(at >= 0, result.allocated_gpu_milli[np.maximum(at, 0)], 0) / GPU_MILLI
    waiting = np.where(at >= 0, result.queue_length[np.maximum(at, 0)], 0)
    return (
        tuple(round(float(g / 3600), 3) for g in grid),
        tuple(round(float(v), 2) for v in held),
        tuple(int(v) for v in waiting),
    )


def _run(
    label: str,
    nodes: Sequence[NodeSpec],
    requests: Sequence[TimedRequest],
    options: ReplayOptions,
    end: int,
) -> WhatIfRun:
    state = ClusterState.from_nodes(nodes, reservation_policy())
    result = replay(state, requests, options)
    summary = summarize(result, requests, window=(0, end))
    waits: dict[str, list[int]] = {}
    never: dict[str, int] = {}
    for t, o in zip(requests, result.outcomes, strict=True):
        if o.wait is None:
            never[t.team] = never.get(t.team, 0) + 1
        else:
            waits.setdefault(t.team, []).append(o.wait)
    hours, held, waiting = _series(result, end)
    return WhatIfRun(
        label,
        options.policy,
        len(nodes),
        int(state.gpu_ok.sum()),
        summary,
        hours,
        held,
        waiting,
        {team: float(np.percentile(v, 95)) for team, v in sorted(waits.items())},
        dict(sorted(never.items())),
    )


def run_whatif(
    group: QuotaGroup, days: int, change: WhatIfChange, now: datetime | None = None
) -> WhatIfReport:
    """Replay the last ``days`` of ``group``'s recorded demand as it is and after ``change``."""
    if change.policy and change.policy not in POLICIES:
        raise InvalidInput(
            f"policy: unknown policy {change.policy!r}.",
            fields={"policy": [f"One of: {', '.join(POLICIES)}."]},
        )
    now = now or timezone.now()
    origin = now - timedelta(days=days)
    end = days * 86400
    records = recorded_demand(origin, now, group)
    requests = timed_requests(records, origin, now)
    current = pool_nodes(group)
    changed_nodes = plan_cluster(current, change)
    policy = settings.TESSERA_PLACEMENT_POLICY
    typical = typical_pods(t.request for t in requests)
    base = ReplayOptions(policy=policy, typical=typical, horizon=end)
    quotas = tuple(
        TeamQuota(team, gpus * GPU_MILLI) for team, gpus in sorted(change.team_gpus.items())
    )
    other = dataclasses.replace(base, policy=change.policy or policy, quotas=quotas)
    recorded = [t.real_start - t.submit for t in requests if t.real_start is not None]
    return WhatIfReport(
        days=days,
        requests=len(requests),
        recorded_waits_p95=float(np.percentile(recorded, 95)) if recorded else 0.0,
        baseline=_run("as it is", current, requests, base, end),
        changed=_run("with the change", changed_nodes, requests, other, end),
    )
