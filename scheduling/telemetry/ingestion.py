"""Ingestion: one minute of telemetry, from the database's view of who holds what plus utilization metrics.

Who holds which share of which GPU comes from our own placements (Placement + PlacementGpu), whatever the
backend. How busy they are comes from a `MetricsSource`:

* `SyntheticMetrics` — the simulated backend: `scheduling.telemetry.synthetic` per workload profile;
* `scheduling.telemetry.prometheus.PrometheusMetrics` — real clusters: DCGM device metrics joined on GPU
  UUID with HAMi's per-container metrics (k8s-integration.md §6.5).

`ingest_minute` writes WorkloadSample, GpuSample, QuotaSample and PoolSample rows for the minute (an
upsert: running it twice for the same minute writes the same rows), then refreshes the hour's rollups.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from core.units import MILLI_PER_GPU
from portal.periodic import ItemFailures, run_each
from portal.transactions import run_in_transaction
from quotas.models import Quota, QuotaGroup
from quotas.usage import group_snapshot
from scheduling.choices import WorkloadKind, WorkloadState
from scheduling.models import Gpu, Node, PlacementGpu, Shard, Workload
from scheduling.telemetry import rollups, synthetic
from scheduling.telemetry.models import (
    Attribution,
    GpuSample,
    PoolSample,
    QuotaSample,
    Resolution,
    Source,
    WorkloadSample,
)
from scheduling.telemetry.prometheus import PrometheusMetrics
from scheduling.telemetry.sample_rows import (
    PoolWaits,
    QuotaIds,
    Window,
    pool_row,
    quota_figures_row,
    quota_usage_row,
)
from scheduling.telemetry.samples import (
    MetricsSource,
    MinuteMetrics,
    Share,
    wait_seconds,
)


class SyntheticMetrics:
    """The simulated cluster: every workload follows its profile (synthetic.py); a GPU's utilization is
    the allocation-weighted sum of its workloads'; an idle card reads 0."""

    source = Source.SIMULATED

    def measure(
        self, minute: datetime, shares: Sequence[Share], gpus: Sequence[Gpu]
    ) -> MinuteMetrics:
        out = MinuteMetrics()
        per_workload_memory: dict[int, int] = defaultdict(int)
        gpu_util: dict[int, float] = defaultdict(float)
        gpu_mem: dict[int, int] = defaultdict(int)
        for share in shares:
            util = synthetic.utilization(share.workload_id, share.profile, minute)
            used = synthetic.memory_used_mib(
                share.workload_id, share.profile, minute, share.gpu_memory_mib
            )
            out.workload_utilization[share.workload_id] = util
            out.workload_attribution[share.workload_id] = Attribution.SIMULATED
            per_workload_memory[share.workload_id] += used
            gpu_util[share.gpu_id] += util * share.gpu_milli / MILLI_PER_GPU
            gpu_mem[share.gpu_id] += used
        out.workload_memory_mib = dict(per_workload_memory)
        for gpu in gpus:
            out.gpu_utilization[gpu.pk] = round(min(gpu_util.get(gpu.pk, 0.0), 100.0), 2)
            out.gpu_memory_mib[gpu.pk] = gpu_mem.get(gpu.pk, 0)
        return out


def metrics_source() -> MetricsSource:
    """Prometheus when `TESSERA_PROMETHEUS_URL` is set, otherwise the synthetic source."""
    url = getattr(settings, "TESSERA_PROMETHEUS_URL", "")
    if url:
        return PrometheusMetrics(url)
    return SyntheticMetrics()


def floor_minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def floor_hour(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def node_in_group(node: Node, group: QuotaGroup) -> bool:
    """A node belongs to a pool when its labels contain every key=value of the group's selector."""
    labels = node.labels or {}
    return all(labels.get(k) == v for k, v in (group.node_selector or {}).items())


def quota_figures(group: QuotaGroup) -> dict[int, tuple[float, float, float, float]]:
    """(min, max, runtime share, borrowed) GPU milli of each quota of `group` on the GPU side, from
    `quotas.usage.group_snapshot`."""
    snapshot = group_snapshot(group)
    return {
        quota_id: (
            float(usage.gpu.min.gpu_milli),
            float(usage.gpu.max.gpu_milli),
            float(usage.gpu.runtime.gpu_milli),
            float(usage.gpu.borrowed.gpu_milli),
        )
        for quota_id, usage in snapshot.quotas.items()
    }


def active_shares() -> list[tuple[Share, Workload, Node]]:
    """Every GPU share of every active placement, with its workload and node."""
    rows = PlacementGpu.objects.filter(placement__released_at__isnull=True).select_related(
        "placement__workload", "placement__node", "gpu"
    )
    out = []
    for row in rows:
        workload = row.placement.workload
        out.append(
            (
                Share(
                    workload_id=workload.pk,
                    workload_name=workload.name,
                    profile=workload.profile,
                    gpu_id=row.gpu_id,
                    gpu_uuid=row.gpu.uuid,
                    gpu_milli=row.gpu_milli,
                    gpu_memory_mib=row.gpu_memory_mib,
                ),
                workload,
                row.placement.node,
            )
        )
    return out


@dataclass
class IngestReport:
    """What one ingestion wrote."""

    minute: datetime
    source: str
    workloads: int
    gpus: int
    quotas: int
    pools: int
    failed_groups: list[int] = field(default_factory=list)


@dataclass
class MinuteInputs:
    """What one minute's rows are built from, read from the database (`read_minute_inputs`): who holds
    which GPU share, the inventory, the quotas with their figures, pending counts, the last cycle time
    and the recent waits per group. The bulk backfill reads it once and builds many minutes from it."""

    shares_full: list[tuple[Share, Workload, Node]]
    nodes: list[Node]
    gpus: list[Gpu]
    groups: list[QuotaGroup]
    quotas: list[Quota]
    pending_by_quota: dict[int, int]
    figures: dict[int, tuple[float, float, float, float]]
    cycle_ms: dict[int, float | None]
    waits: dict[int, list[float]]
    # Groups whose figures (no quota figures rows) or waits (no pool row) could not be read.
    figures_failed: set[int] = field(default_factory=set)
    waits_failed: set[int] = field(default_factory=set)


@dataclass
class MinuteRows:
    """The rows of one minute, per table."""

    workloads: list[WorkloadSample]
    gpus: list[GpuSample]
    quotas: list[QuotaSample]
    pools: list[PoolSample]


def read_minute_inputs(minute: datetime, failures: ItemFailures) -> MinuteInputs:
    """Read everything a minute's rows need. Each quota group's figures and waits are read on their
    own (`portal.periodic.run_each`): a group that raises is counted in `failures`."""
    groups = list(QuotaGroup.objects.all())
    quotas = list(Quota.objects.all())
    pending_by_quota: dict[int, int] = defaultdict(int)
    for quota_id in Workload.objects.filter(
        state=WorkloadState.PENDING, gpu_count__gt=0
    ).values_list("quota_id", flat=True):
        pending_by_quota[quota_id] += 1
    figures: dict[int, tuple[float, float, float, float]] = {}
    waits: dict[int, list[float]] = {}

    def figures_of(group: QuotaGroup) -> None:
        figures.update(quota_figures(group))

    def waits_of(group: QuotaGroup) -> None:
        waits[group.pk] = wait_seconds(
            [q.pk for q in quotas if q.group_id == group.pk],
            minute - timedelta(minutes=59),
            minute + timedelta(minutes=1),
        )

    before = len(failures.failed_ids)
    run_each(groups, figures_of, task="telemetry-ingestion", kind="quota group", failures=failures)
    figures_failed = set(failures.failed_ids[before:])
    before = len(failures.failed_ids)
    run_each(groups, waits_of, task="telemetry-ingestion", kind="quota group", failures=failures)
    waits_failed = set(failures.failed_ids[before:])
    return MinuteInputs(
        shares_full=active_shares(),
        nodes=list(Node.objects.all()),
        gpus=list(Gpu.objects.select_related("node").all()),
        groups=groups,
        quotas=quotas,
        pending_by_quota=dict(pending_by_quota),
        figures=figures,
        cycle_ms=dict(
            Shard.objects.filter(last_cycle_ms__isnull=False).values_list(
                "group_id", "last_cycle_ms"
            )
        ),
        waits=waits,
        figures_failed=figures_failed,
        waits_failed=waits_failed,
    )


def build_minute_rows(
    minute: datetime, inputs: MinuteInputs, metrics: MinuteMetrics, source: str
) -> MinuteRows:
    """The rows of `minute` from `inputs` and the measured `metrics` (no database access). Groups
    whose figures or waits could not be read get no figures rows or no pool row."""
    workloads: dict[int, Workload] = {}
    workload_node: dict[int, Node] = {}
    allocated: dict[int, int] = defaultdict(int)
    gpu_allocated: dict[int, int] = defaultdict(int)
    for share, workload, node in inputs.shares_full:
        workloads[workload.pk] = workload
        workload_node[workload.pk] = node
        allocated[workload.pk] += share.gpu_milli
        gpu_allocated[share.gpu_id] += share.gpu_milli

    workload_rows = []
    for workload_id, workload in workloads.items():
        util = metrics.workload_utilization.get(workload_id)
        milli = allocated[workload_id]
        workload_rows.append(
            WorkloadSample(
                ts=minute,
                workload_id=workload_id,
                tenant_id=workload.tenant_id,
                quota_id=workload.quota_id,
                kind=workload.kind,
                allocated_milli=milli,
                sm_utilization=util,
                used_milli=round(milli * (util or 0.0) / 100, 3),
                memory_used_mib=metrics.workload_memory_mib.get(workload_id, 0),
                source=source,
                attribution=metrics.workload_attribution.get(workload_id, "")
                if util is not None
                else "",
            )
        )
    utilization, memory = metrics.gpu_utilization, metrics.gpu_memory_mib
    gpu_rows = [
        GpuSample(
            ts=minute,
            gpu_id=gpu_id,
            sm_utilization=utilization.get(gpu_id, 0.0),
            memory_used_mib=memory.get(gpu_id, 0),
            allocated_milli=gpu_allocated.get(gpu_id, 0),
            source=source,
        )
        for gpu_id in (gpu.pk for gpu in inputs.gpus)
    ]
    quota_rows = _quota_rows(minute, inputs, inputs.figures_failed, workload_rows, workload_node)
    pool_rows = _pool_rows(minute, inputs, inputs.waits_failed, metrics, gpu_allocated)
    return MinuteRows(workload_rows, gpu_rows, quota_rows, pool_rows)


def ingest_minute(
    now: datetime | None = None, source: MetricsSource | None = None, *, rollup: bool = True
) -> IngestReport:
    """Record one minute of telemetry (the minute containing `now`) and refresh that hour's rollups.

    Idempotent per minute (rows are replaced). Reads placements, inventory and quota snapshots; writes only
    telemetry tables, in one transaction. Each quota group's figures and pool row are computed on their
    own (`portal.periodic.run_each`): a group that raises is logged, listed in `failed_groups` and left
    out of this minute, and the other groups are still recorded.
    """
    minute = floor_minute(now or timezone.now())
    source = source or metrics_source()
    failures = ItemFailures()
    inputs = read_minute_inputs(minute, failures)
    metrics = source.measure(minute, [s for s, _w, _n in inputs.shares_full], inputs.gpus)
    rows = build_minute_rows(minute, inputs, metrics, str(source.source))

    def write() -> None:
        WorkloadSample.objects.filter(ts=minute).delete()
        WorkloadSample.objects.bulk_create(rows.workloads)
        GpuSample.objects.filter(ts=minute).delete()
        GpuSample.objects.bulk_create(rows.gpus)
        QuotaSample.objects.filter(resolution=Resolution.MINUTE, ts=minute).delete()
        QuotaSample.objects.bulk_create(rows.quotas)
        PoolSample.objects.filter(resolution=Resolution.MINUTE, ts=minute).delete()
        PoolSample.objects.bulk_create(rows.pools)
        if rollup:
            rollups.rollup_hour(floor_hour(minute))

    # Replacing the minute's rows is idempotent: a write that lost a lock race runs again.
    run_in_transaction(write, name="telemetry ingestion")
    return IngestReport(
        minute=minute,
        source=str(source.source),
        workloads=len(rows.workloads),
        gpus=len(rows.gpus),
        quotas=len(inputs.quotas),
        pools=len(rows.pools),
        failed_groups=sorted(set(failures.failed_ids)),
    )


def _quota_rows(
    minute: datetime,
    inputs: MinuteInputs,
    failed: set[int],
    workload_rows: Sequence[WorkloadSample],
    workload_node: dict[int, Node],
) -> list[QuotaSample]:
    """One row per quota with its quota figures and pending count (gpu_model ""), plus one row per
    (quota, GPU model) it holds with the allocation, use and idle allocation. Quotas of a group whose
    figures raised (`failed`) get no figures row this minute."""
    figures = inputs.figures
    quotas = inputs.quotas
    pending_by_quota = inputs.pending_by_quota
    by_model: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for row in workload_rows:
        model = workload_node[row.workload_id].gpu_model
        acc = by_model[(row.quota_id, model)]
        acc[0] += row.allocated_milli
        acc[1] += row.used_milli
        if synthetic.is_idle(row.sm_utilization):
            acc[2] += row.allocated_milli
    quota_by_id = {q.pk: q for q in quotas}
    window = Window.minute(minute)
    out = []
    for quota in quotas:
        if quota.group_id in failed:
            continue
        minimum, maximum, runtime, borrowed = figures.get(quota.pk, (0.0, 0.0, 0.0, 0.0))
        out.append(
            quota_figures_row(
                window,
                QuotaIds.of(quota),
                {
                    "min_milli": minimum,
                    "max_milli": maximum,
                    "runtime_milli": runtime,
                    "borrowed_milli": borrowed,
                    "pending": pending_by_quota.get(quota.pk, 0),
                },
            )
        )
    for (quota_id, model), (alloc, used, idle) in sorted(by_model.items()):
        out.append(
            quota_usage_row(
                window,
                QuotaIds.of(quota_by_id[quota_id]),
                model,
                allocated_milli=alloc,
                used_milli=round(used, 3),
                idle_milli=idle,
            )
        )
    return out


def _pool_rows(
    minute: datetime,
    inputs: MinuteInputs,
    failed: set[int],
    metrics: MinuteMetrics,
    gpu_allocated: dict[int, int],
) -> list[PoolSample]:
    nodes, gpus, quotas = inputs.nodes, inputs.gpus, inputs.quotas
    shares_full, pending_by_quota, cycle_ms = (
        inputs.shares_full,
        inputs.pending_by_quota,
        inputs.cycle_ms,
    )
    gpus_by_node: dict[int, list[Gpu]] = defaultdict(list)
    for gpu in gpus:
        gpus_by_node[gpu.node_id].append(gpu)
    out: list[PoolSample] = []

    def add_pool_row(group: QuotaGroup) -> None:
        member_ids = {n.pk for n in nodes if node_in_group(n, group)}
        healthy = [
            g
            for node in nodes
            if node.pk in member_ids and node.healthy
            for g in gpus_by_node[node.pk]
            if g.healthy
        ]
        healthy_ids = {g.pk for g in healthy}
        allocated_milli = sum(gpu_allocated.get(g, 0) for g in healthy_ids)
        allocated_gpus = sum(1 for g in healthy_ids if gpu_allocated.get(g, 0) > 0)
        utils = [metrics.gpu_utilization.get(g, 0.0) for g in healthy_ids]
        group_quota_ids = [q.pk for q in quotas if q.group_id == group.pk]
        unsliced = 0
        occupied: set[int] = set()
        for share, workload, node in shares_full:
            if node.pk not in member_ids or workload.kind != WorkloadKind.CODESPACE:
                continue
            if share.gpu_milli < MILLI_PER_GPU:
                unsliced += 1
                occupied.add(share.gpu_id)
        out.append(
            pool_row(
                Window.minute(minute),
                group.pk,
                {
                    "capacity_gpus": len(healthy),
                    "capacity_milli": len(healthy) * MILLI_PER_GPU,
                    "allocated_gpus": allocated_gpus,
                    "allocated_milli": allocated_milli,
                    "sm_utilization": round(statistics.fmean(utils), 3) if utils else 0.0,
                    "pending": sum(pending_by_quota.get(q, 0) for q in group_quota_ids),
                    "codespace_cards_unsliced": unsliced,
                    "codespace_cards_occupied": len(occupied),
                },
                PoolWaits.of(inputs.waits.get(group.pk, [])),
                cycle_ms=cycle_ms.get(group.pk),
            )
        )

    # Built from what was read (no database access): only the reads are guarded per group.
    for group in inputs.groups:
        if group.pk not in failed:
            add_pool_row(group)
    return out
