"""What-if capacity planning: replay a pool's recorded demand (or an uploaded trace) on its cluster as it
is and as it would be after a change (nodes of a GPU model added or removed, another sharing mode, another
policy, GPU caps per team), side by side.

Decide, then report: `plan_cluster` turns the change into the node list and `requests_under` the demand
into what it would ask under the new sharing mode (pure data, `InvalidInput` naming the field when the
change cannot apply), `run_whatif` replays both (`core.simulation`) and returns figures and plot
series. Nothing is stored or changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from django.conf import settings
from django.utils import timezone

from core.placement import GPU_MILLI, POLICIES, ClusterState, NodeSpec, typical_pods
from core.simulation import (
    ReplayOptions,
    ReplayResult,
    Summary,
    TeamQuota,
    TimedRequest,
    replay,
    summarize,
)
from core.units import mig_gpu_equivalent_milli, mig_memory_mib
from portal.errors import InvalidInput
from quotas.models import QuotaGroup
from quotas.sharing import Sharing, SharingMode, clean_sharing
from scheduling.services.demand import pool_nodes, recorded_demand, timed_requests
from scheduling.services.snapshot import reservation_policy
from scheduling.services.trace_upload import UploadedTrace

MAX_NODES_CHANGED = 500
#: Points per plotted series at most (the step functions are sampled on an even grid).
PLOT_POINTS = 400


@dataclass(frozen=True)
class WhatIfChange:
    """The change to try. ``team_gpus``: tenant slug -> GPUs it may hold at once (a cap).
    ``sharing_mode`` ('' = unchanged): the pool's new mode, with ``mig_profiles`` / ``timeslice_replicas``
    as `quotas.sharing.clean_sharing` takes them."""

    add_model: str = ""
    add_count: int = 0
    remove_model: str = ""
    remove_count: int = 0
    policy: str = ""
    team_gpus: Mapping[str, int] = field(default_factory=dict)
    sharing_mode: str = ""
    mig_profiles: tuple[str, ...] = ()
    timeslice_replicas: int = 1


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
    sharing: str = SharingMode.SLICE
    refused: int = 0


@dataclass(frozen=True)
class WhatIfReport:
    """Both runs. ``source``: ``recorded`` (the pool's last ``days``) or ``uploaded`` (a trace covering
    ``days``, rounded up)."""

    days: int
    requests: int
    recorded_waits_p95: float
    baseline: WhatIfRun
    changed: WhatIfRun
    source: str = "recorded"


def new_sharing(current: Sharing, change: WhatIfChange) -> Sharing:
    """The pool's sharing after ``change`` (the current one when it names no mode). Raises InvalidInput
    naming ``sharing_mode``, ``mig_profiles`` or ``timeslice_replicas``."""
    if not change.sharing_mode:
        return current
    sharing, errors = clean_sharing(
        change.sharing_mode, list(change.mig_profiles), change.timeslice_replicas
    )
    if sharing is None:
        name, reasons = next(iter(errors.items()))
        raise InvalidInput(f"{name}: {reasons[0]}", fields=errors)
    return sharing


def _mig_profile_for(sharing: Sharing, milli: int, memory_mib: int) -> str | None:
    """The smallest of the pool's profiles that holds ``milli`` of compute and ``memory_mib`` (GPU)."""
    fits = [
        p
        for p in sharing.mig_profiles
        if mig_gpu_equivalent_milli(p) >= min(milli, 994) and mig_memory_mib(p) >= memory_mib
    ]
    return min(fits, key=lambda p: (mig_gpu_equivalent_milli(p), mig_memory_mib(p)), default=None)


def requests_under(
    sharing: Sharing, requests: Sequence[TimedRequest]
) -> tuple[list[TimedRequest], int]:
    """What the demand would ask in a pool shared by ``sharing``, and how many requests it would refuse.

    ``exclusive``: a slice takes whole GPUs. ``slice``: as asked. ``timeslice``: a one-GPU request takes
    one replica (1/N of a GPU, no memory reserved); several GPUs are refused. ``mig``: a one-GPU request
    takes the smallest of the pool's profiles that holds its compute and memory (placed as the profile's
    GPU-equivalent share of a card; the cards' instance geometry is not modelled, so this is an upper
    bound of what fits); several GPUs, or more than the largest profile, are refused. CPU-only requests
    are unchanged in every mode."""
    out: list[TimedRequest] = []
    refused = 0
    for t in requests:
        r = t.request
        if r.gpu_count == 0 or r.gpu_milli == 0:
            out.append(t)
            continue
        if sharing.mode == SharingMode.EXCLUSIVE:
            if r.gpu_milli < GPU_MILLI:
                r = dataclasses.replace(r, gpu_milli=GPU_MILLI, gpu_memory_mib=0)
        elif sharing.mode == SharingMode.TIMESLICE:
            if r.gpu_count != 1:
                refused += 1
                continue
            r = dataclasses.replace(r, gpu_milli=sharing.replica_milli, gpu_memory_mib=0)
        elif sharing.mode == SharingMode.MIG:
            profile = _mig_profile_for(sharing, r.gpu_milli, r.gpu_memory_mib)
            if r.gpu_count != 1 or profile is None:
                refused += 1
                continue
            r = dataclasses.replace(
                r,
                gpu_milli=mig_gpu_equivalent_milli(profile),
                gpu_memory_mib=mig_memory_mib(profile),
            )
        out.append(t if r is t.request else dataclasses.replace(t, request=r))
    return out, refused


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
    sharing: Sharing,
    refused: int = 0,
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
        sharing.mode,
        refused,
    )


def run_whatif(
    group: QuotaGroup,
    days: int,
    change: WhatIfChange,
    now: datetime | None = None,
    trace: UploadedTrace | None = None,
) -> WhatIfReport:
    """Replay the last ``days`` of ``group``'s recorded demand (or ``trace``, from its first creation to
    its last end, when given) as it is and after ``change``."""
    if change.policy and change.policy not in POLICIES:
        raise InvalidInput(
            f"policy: unknown policy {change.policy!r}.",
            fields={"policy": [f"One of: {', '.join(POLICIES)}."]},
        )
    current_sharing = group.sharing
    sharing = new_sharing(current_sharing, change)
    if trace is None:
        now = now or timezone.now()
        origin = now - timedelta(days=days)
        end = days * 86400
        records = recorded_demand(origin, now, group)
        requests = timed_requests(records, origin, now)
    else:
        requests, end = list(trace.requests), trace.end
        days = max(1, -(-end // 86400))
    current = pool_nodes(group)
    changed_nodes = plan_cluster(current, change)
    changed_requests, refused = requests_under(sharing, requests)
    policy = settings.TESSERA_PLACEMENT_POLICY
    typical = typical_pods(t.request for t in requests)
    base = ReplayOptions(policy=policy, typical=typical, horizon=end)
    quotas = tuple(
        TeamQuota(team, gpus * GPU_MILLI) for team, gpus in sorted(change.team_gpus.items())
    )
    other = dataclasses.replace(
        base,
        policy=change.policy or policy,
        quotas=quotas,
        typical=typical_pods(t.request for t in changed_requests)
        if refused or sharing != current_sharing
        else typical,
    )
    recorded = [t.real_start - t.submit for t in requests if t.real_start is not None]
    return WhatIfReport(
        days=days,
        requests=len(requests),
        recorded_waits_p95=float(np.percentile(recorded, 95)) if recorded else 0.0,
        baseline=_run("as it is", current, requests, base, end, current_sharing),
        changed=_run(
            "with the change", changed_nodes, changed_requests, other, end, sharing, refused
        ),
        source="recorded" if trace is None else "uploaded",
    )
