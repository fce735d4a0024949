"""Recorded demand: every workload submitted in a time window, with its shape, submit, start and end, as
rows to export and as the timed requests `core.simulation.replay` takes (the what-if planner's and
the bench's input). The workloads table already keeps all of it; nothing new is recorded.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields
from datetime import datetime

import numpy as np

from core.placement import ClusterState, NodeSpec
from core.simulation import TimedRequest
from portal.csv_export import csv_writer
from quotas.models import QuotaGroup
from scheduling.models import Gpu, Workload
from scheduling.services.snapshot import (
    group_nodes,
    node_spec,
    reservation_policy,
    workload_request,
)

#: Rows one export returns at most (the newest submissions of the window are kept).
MAX_ROWS = 200_000
#: Longest window in days.
MAX_DAYS = 90
#: Run time assumed for a workload that never started when nothing of its kind ever finished.
DEFAULT_DURATION_SECONDS = 3600


@dataclass(frozen=True)
class DemandRecord:
    """One recorded request (times are aware datetimes; ``started_at``/``finished_at`` may be empty)."""

    workload_id: int
    kind: str
    tenant: str
    quota_id: int
    group: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_milli: int
    gpu_memory_mib: int
    gpu_models: str
    priority: int
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


COLUMNS = tuple(f.name for f in fields(DemandRecord))


def recorded_demand(
    start: datetime, end: datetime, group: QuotaGroup | None = None
) -> list[DemandRecord]:
    """Workloads submitted in ``[start, end)`` (of ``group`` if given), oldest first."""
    rows = Workload.objects.filter(submitted_at__gte=start, submitted_at__lt=end)
    if group is not None:
        rows = rows.filter(quota__group=group)
    picked = rows.select_related("tenant", "quota__group").order_by("-submitted_at", "-pk")
    out = [
        DemandRecord(
            w.pk,
            w.kind,
            w.tenant.slug,
            w.quota_id,
            w.quota.group.name,
            w.cpu_milli,
            w.memory_mib,
            w.gpu_count,
            w.gpu_milli,
            w.gpu_memory_mib,
            "|".join(w.gpu_models or ()),
            w.priority,
            w.submitted_at,
            w.started_at,
            w.finished_at,
        )
        for w in picked[:MAX_ROWS]
    ]
    out.reverse()
    return out


def demand_csv(records: Sequence[DemandRecord]) -> str:
    """The records as CSV (header = :data:`COLUMNS`, times ISO 8601, empty when unknown)."""
    buffer = io.StringIO()
    writer = csv_writer(buffer)
    writer.writerow(COLUMNS)
    for record in records:
        writer.writerow(
            "" if v is None else v.isoformat() if isinstance(v, datetime) else v
            for v in astuple(record)
        )
    return buffer.getvalue()


def _duration(record: DemandRecord, until: datetime, typical: dict[str, int]) -> int:
    if record.started_at is not None:
        ended = record.finished_at or until
        return max(1, int((ended - record.started_at).total_seconds()))
    return typical.get(record.kind, DEFAULT_DURATION_SECONDS)


def timed_requests(
    records: Sequence[DemandRecord], origin: datetime, until: datetime
) -> list[TimedRequest]:
    """The records as the simulator's requests: submit = seconds after ``origin``, duration = end −
    start (still running at ``until``: until then; never started: the median run time of its kind),
    team = the tenant. ``real_start`` keeps when it really started."""
    runs: dict[str, list[int]] = {}
    for r in records:
        if r.started_at is not None and r.finished_at is not None:
            runs.setdefault(r.kind, []).append(int((r.finished_at - r.started_at).total_seconds()))
    typical = {kind: max(1, int(np.median(v))) for kind, v in runs.items()}
    out = []
    for r in records:
        w = Workload(
            pk=r.workload_id,
            cpu_milli=r.cpu_milli,
            memory_mib=r.memory_mib,
            gpu_count=r.gpu_count,
            gpu_milli=r.gpu_milli,
            gpu_memory_mib=r.gpu_memory_mib,
            gpu_models=[m for m in r.gpu_models.split("|") if m],
            priority=r.priority,
        )
        started = r.started_at
        out.append(
            TimedRequest(
                workload_request(w),
                submit=int((r.submitted_at - origin).total_seconds()),
                duration=_duration(r, until, typical),
                team=r.tenant,
                real_start=None if started is None else int((started - origin).total_seconds()),
            )
        )
    return out


def pool_nodes(group: QuotaGroup) -> list[NodeSpec]:
    """The group's nodes as engine node specs (what recorded demand is replayed on)."""
    nodes = group_nodes(group)
    gpus: dict[int, list[Gpu]] = {n.pk: [] for n in nodes}
    for gpu in Gpu.objects.filter(node__in=nodes).order_by("node_id", "index"):
        gpus[gpu.node_id].append(gpu)
    return [node_spec(n, gpus[n.pk]) for n in nodes]


def empty_cluster(group: QuotaGroup) -> ClusterState:
    """The group's nodes as an engine state with nothing placed."""
    return ClusterState.from_nodes(pool_nodes(group), reservation_policy())
