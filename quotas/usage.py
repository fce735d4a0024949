"""Group snapshots: capacity, and per quota and side the used / pending / demand / runtime / headroom.

`group_snapshot(group)` reads the database once (nodes, GPUs, quotas, workloads of the group) and returns an
immutable `GroupSnapshot`; everything after that is pure (`build_snapshot`), so admission, reclaim and the
what-if preview recompute runtimes on modified copies without touching the database.

Capacity (docs/quotas.md "Capacity"): only nodes whose labels contain every pair of the group's
`node_selector`, that are not cordoned and are healthy, count.
- GPU side: 1000 milli and the memory of every healthy GPU, plus all CPU and memory of GPU nodes (nodes
  with at least one healthy GPU).
- CPU side: all CPU and memory of CPU-only nodes, plus the CPU and memory of GPU nodes minus the
  reservation kept for GPU work there (the node's `Reservation` row, else
  `TESSERA_GPU_NODE_CPU_RESERVED_FRACTION` / `TESSERA_GPU_NODE_MEMORY_RESERVED_FRACTION`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection

from quotas.models import Quota, QuotaGroup
from quotas.resources import Resources, Side, total
from quotas.runtime import QuotaShareInput, ShareInput, runtime_1d, runtime_shares

SIDES = (Side.GPU, Side.CPU)


# --------------------------------------------------------------------------------------------- capacity


@dataclass(frozen=True, slots=True)
class GroupCapacity:
    """The schedulable capacity of a group per side, and what was counted."""

    gpu: Resources
    cpu: Resources
    nodes_counted: int = 0
    nodes_excluded: int = 0
    gpus_healthy: int = 0
    gpus_unhealthy: int = 0

    def side(self, side: Side | str) -> Resources:
        return self.gpu if Side(side) is Side.GPU else self.cpu


def node_matches(labels: dict[str, Any] | None, selector: dict[str, Any] | None) -> bool:
    """True when `labels` contains every key/value pair of `selector` (an empty selector matches all)."""
    labels = labels or {}
    return all(str(labels.get(key)) == str(value) for key, value in (selector or {}).items())


def matching_nodes(group: QuotaGroup) -> list[Any]:
    """The Node rows selected by the group's `node_selector` (all of them, cordoned or not)."""
    from scheduling.models import Node

    selector = {str(key): str(value) for key, value in (group.node_selector or {}).items()}
    nodes = Node.objects.prefetch_related("gpus").order_by("name")
    if selector and connection.vendor == "postgresql":
        nodes = nodes.filter(labels__contains=selector)  # narrows in SQL; the check below decides
    return [node for node in nodes if node_matches(node.labels, selector)]


def default_reservation(node: Any) -> tuple[int, int]:
    """CPU and memory of a GPU node kept for GPU work when it has no Reservation row."""
    cpu_fraction = float(settings.TESSERA_GPU_NODE_CPU_RESERVED_FRACTION)
    memory_fraction = float(settings.TESSERA_GPU_NODE_MEMORY_RESERVED_FRACTION)
    return (
        math.floor(int(node.cpu_milli) * cpu_fraction),
        math.floor(int(node.memory_mib) * memory_fraction),
    )


def group_capacity(group: QuotaGroup, nodes: Sequence[Any] | None = None) -> GroupCapacity:
    """The capacity of `group` per side (see the module docstring for the exact definition)."""
    from scheduling.models import Node, Reservation

    if nodes is None:
        nodes = matching_nodes(group)
    reservations = {
        r.node_id: (int(r.cpu_milli), int(r.memory_mib))
        for r in Reservation.objects.filter(node__in=[n.pk for n in nodes])
    }
    gpu_side = Resources()
    cpu_side = Resources()
    counted = excluded = healthy_gpus = unhealthy_gpus = 0
    for node in nodes:
        assert isinstance(node, Node)
        if node.cordoned or not node.healthy:
            excluded += 1
            continue
        counted += 1
        gpus = list(node.gpus.all())
        healthy = [gpu for gpu in gpus if gpu.healthy]
        healthy_gpus += len(healthy)
        unhealthy_gpus += len(gpus) - len(healthy)
        node_cpu = Resources(cpu_milli=int(node.cpu_milli), memory_mib=int(node.memory_mib))
        if healthy:
            gpu_side = (
                gpu_side
                + node_cpu
                + Resources(
                    gpu_milli=1000 * len(healthy),
                    gpu_memory_mib=sum(int(gpu.memory_mib) for gpu in healthy),
                )
            )
            if node.pk in reservations:
                cpu_kept, memory_kept = reservations[node.pk]
            else:
                cpu_kept, memory_kept = default_reservation(node)
            cpu_side = (
                cpu_side + (node_cpu - Resources(cpu_milli=cpu_kept, memory_mib=memory_kept)).clip()
            )
        else:
            cpu_side = cpu_side + node_cpu
    return GroupCapacity(
        gpu=gpu_side,
        cpu=cpu_side,
        nodes_counted=counted,
        nodes_excluded=excluded,
        gpus_healthy=healthy_gpus,
        gpus_unhealthy=unhealthy_gpus,
    )


# --------------------------------------------------------------------------------------------- workloads


@dataclass(frozen=True, slots=True)
class WorkloadUsage:
    """What one workload asks for and where it stands, as the quota code sees it."""

    workload_id: int
    name: str
    kind: str
    quota_id: int
    side: Side
    resources: Resources
    active: bool
    priority: int = 0
    preemptible: bool = True
    gang_id: int | None = None
    gang_name: str = ""
    started_at: datetime | None = None


def workload_side(workload: Any) -> Side:
    """GPU side when the workload uses a GPU, CPU side otherwise."""
    return Side.GPU if int(getattr(workload, "gpu_count", 0) or 0) > 0 else Side.CPU


def workload_resources(workload: Any) -> Resources:
    """The total request of a workload (per-GPU milli and memory times its GPU count)."""
    gpu_count = int(getattr(workload, "gpu_count", 0) or 0)
    return Resources(
        gpu_milli=gpu_count * int(getattr(workload, "gpu_milli", 0) or 0),
        gpu_memory_mib=gpu_count * int(getattr(workload, "gpu_memory_mib", 0) or 0),
        cpu_milli=int(workload.cpu_milli or 0),
        memory_mib=int(workload.memory_mib or 0),
    )


def usage_of(workload: Any) -> WorkloadUsage:
    """A WorkloadUsage for a Workload row (saved or not)."""
    from scheduling.choices import ACTIVE_STATES

    gang = getattr(workload, "gang", None) if getattr(workload, "gang_id", None) else None
    return WorkloadUsage(
        workload_id=int(workload.pk or 0),
        name=str(workload.name),
        kind=str(workload.kind),
        quota_id=int(workload.quota_id),
        side=workload_side(workload),
        resources=workload_resources(workload),
        active=workload.state in ACTIVE_STATES,
        priority=int(workload.priority or 0),
        preemptible=bool(workload.preemptible),
        gang_id=workload.gang_id,
        gang_name=gang.name if gang is not None else "",
        started_at=workload.started_at or workload.placed_at,
    )


# --------------------------------------------------------------------------------------------- snapshot


@dataclass(frozen=True, slots=True)
class QuotaSpec:
    """A quota's configuration as the runtime calculation needs it."""

    quota_id: int
    name: str
    tenant_id: int
    tenant_slug: str
    lend_idle_min: bool
    min: dict[Side, Resources]
    max: dict[Side, Resources]
    weight: dict[Side, Resources]

    @classmethod
    def of(cls, quota: Quota) -> QuotaSpec:
        return cls(
            quota_id=int(quota.pk or 0),
            name=quota.name,
            tenant_id=int(quota.tenant_id),
            tenant_slug=quota.tenant.slug,
            lend_idle_min=bool(quota.lend_idle_min),
            min={side: quota.min_of(side) for side in SIDES},
            max={side: quota.max_of(side) for side in SIDES},
            weight={side: quota.weight_of(side) for side in SIDES},
        )


@dataclass(frozen=True, slots=True)
class SideUsage:
    """One side of one quota, all in Resources vectors.

    used: active (placed/running) workloads; pending: waiting ones; demand = used + pending;
    runtime: its share now (quotas.runtime); borrowed: used beyond min; over_runtime: used beyond runtime
    (reclaimable); headroom: how much more it could start now (its runtime if it asked for its whole max,
    minus used); guaranteed_headroom: the part of the headroom within min (min − used).
    """

    min: Resources
    max: Resources
    weight: Resources
    used: Resources
    pending: Resources
    demand: Resources
    runtime: Resources
    nonpreemptible_used: Resources
    headroom: Resources = field(default_factory=Resources)

    @property
    def borrowed(self) -> Resources:
        return (self.used - self.min).clip()

    @property
    def over_runtime(self) -> Resources:
        return (self.used - self.runtime).clip()

    @property
    def guaranteed_headroom(self) -> Resources:
        return (self.min - self.used).clip().minimum(self.headroom)


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    """A quota in a snapshot: its spec and both sides."""

    spec: QuotaSpec
    gpu: SideUsage
    cpu: SideUsage

    @property
    def quota_id(self) -> int:
        return self.spec.quota_id

    @property
    def name(self) -> str:
        return self.spec.name

    def side(self, side: Side | str) -> SideUsage:
        return self.gpu if Side(side) is Side.GPU else self.cpu


Totals = dict[Side, dict[str, dict[int, Resources]]]
"""Per side, per kind ("used", "pending", "nonpreemptible"), per quota id: the summed requests."""


def _empty_totals(quota_ids: Iterable[int]) -> Totals:
    ids = list(quota_ids)
    return {
        side: {
            kind: dict.fromkeys(ids, Resources()) for kind in ("used", "pending", "nonpreemptible")
        }
        for side in SIDES
    }


def _copy_totals(totals: Totals) -> Totals:
    return {
        side: {kind: dict(values) for kind, values in kinds.items()}
        for side, kinds in totals.items()
    }


def _add(totals: Totals, workload: WorkloadUsage, sign: int) -> None:
    """Add (sign=1) or remove (sign=-1) one workload's request, in place."""
    side = workload.side
    if workload.quota_id not in totals[side]["used"]:
        return
    resources = workload.resources.only(side.dimensions).scaled(sign)
    kind = "used" if workload.active else "pending"
    bucket = totals[side][kind]
    bucket[workload.quota_id] = bucket[workload.quota_id] + resources
    if workload.active and not workload.preemptible:
        held = totals[side]["nonpreemptible"]
        held[workload.quota_id] = held[workload.quota_id] + resources


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """The state of one group at one moment: capacity, quotas (by id) and their workloads.

    `has_headroom`: whether `SideUsage.headroom` was computed (group_snapshot does by default; the derived
    copies made by `with_workloads` / `without_workloads` / `with_spec` do not, they are for admission,
    reclaim and what-if, which never read it).
    """

    group_id: int
    group_name: str
    allow_overcommitted_min: bool
    capacity: GroupCapacity
    specs: tuple[QuotaSpec, ...]
    workloads: tuple[WorkloadUsage, ...]
    quotas: dict[int, QuotaUsage]
    totals: Totals = field(default_factory=dict, repr=False, compare=False)
    has_headroom: bool = True
    pending_ids: frozenset[int] = field(default_factory=frozenset, repr=False, compare=False)

    def quota(self, quota_id: int) -> QuotaUsage:
        return self.quotas[quota_id]

    def by_name(self, name: str) -> QuotaUsage:
        for usage in self.quotas.values():
            if usage.name == name:
                return usage
        raise KeyError(name)

    def ordered(self) -> list[QuotaUsage]:
        return sorted(self.quotas.values(), key=lambda q: q.name)

    def used(self, side: Side | str) -> Resources:
        return total(q.side(side).used for q in self.quotas.values())

    def free(self, side: Side | str) -> Resources:
        """Capacity of the side not used by any quota of the group (never negative)."""
        return (self.capacity.side(side) - self.used(side)).clip()

    def sum_of_mins(self, side: Side | str) -> Resources:
        return total(q.side(side).min for q in self.quotas.values())

    def _derived(
        self,
        *,
        specs: Sequence[QuotaSpec] | None = None,
        workloads: Sequence[WorkloadUsage] | None = None,
        totals: Totals | None = None,
        capacity: GroupCapacity | None = None,
    ) -> GroupSnapshot:
        return _compute(
            group_id=self.group_id,
            group_name=self.group_name,
            allow_overcommitted_min=self.allow_overcommitted_min,
            capacity=capacity or self.capacity,
            specs=tuple(sorted(specs, key=lambda s: s.name)) if specs is not None else self.specs,
            workloads=tuple(workloads) if workloads is not None else self.workloads,
            totals=totals if totals is not None else self.totals,
            headroom=False,
        )

    def with_workloads(self, extra: Iterable[WorkloadUsage]) -> GroupSnapshot:
        """The same group with `extra` workloads added (replacing any with the same id), recomputed.

        Incremental: only the changed workloads are re-summed (cheap enough to call per admission)."""
        extra = [w for w in extra if w.quota_id in self.quotas]
        replaced = {w.workload_id for w in extra if w.workload_id}
        totals = _copy_totals(self.totals)
        kept = []
        for w in self.workloads:
            if w.workload_id in replaced:
                _add(totals, w, -1)
            else:
                kept.append(w)
        for w in extra:
            _add(totals, w, 1)
        return self._derived(workloads=[*kept, *extra], totals=totals)

    def without_workloads(self, workload_ids: Iterable[int]) -> GroupSnapshot:
        """The same group without the given workloads (e.g. after reclaiming them), recomputed."""
        gone = set(workload_ids)
        totals = _copy_totals(self.totals)
        kept = []
        for w in self.workloads:
            if w.workload_id in gone:
                _add(totals, w, -1)
            else:
                kept.append(w)
        return self._derived(workloads=kept, totals=totals)

    def with_spec(self, spec: QuotaSpec) -> GroupSnapshot:
        """The same group with one quota's configuration replaced (or added), recomputed."""
        specs = [s for s in self.specs if s.quota_id != spec.quota_id or not spec.quota_id]
        specs = [s for s in specs if s.name != spec.name]
        totals = _copy_totals(self.totals)
        for side in SIDES:
            for kind in totals[side].values():
                kind.setdefault(spec.quota_id, Resources())
        return self._derived(specs=[*specs, spec], totals=totals)

    def with_capacity(self, capacity: GroupCapacity) -> GroupSnapshot:
        return self._derived(capacity=capacity)


def _side_runtimes(
    capacity: Resources,
    specs: Sequence[QuotaSpec],
    side: Side,
    demand: dict[int, Resources],
) -> dict[str, Resources]:
    return runtime_shares(
        capacity.only(side.dimensions),
        [
            QuotaShareInput(
                name=spec.name,
                min=spec.min[side],
                max=spec.max[side],
                weight=spec.weight[side],
                demand=demand[spec.quota_id],
                lend=spec.lend_idle_min,
            )
            for spec in specs
        ],
    )


def _headrooms(
    capacity: Resources,
    specs: Sequence[QuotaSpec],
    side: Side,
    demand: dict[int, Resources],
    used: dict[int, Resources],
) -> dict[int, Resources]:
    """Per quota: (its runtime if it asked for its whole max, others unchanged) − used, per dimension.

    One `runtime_1d` per quota and dimension, skipped where the demand already reaches the max."""
    result: dict[int, dict[str, int]] = {spec.quota_id: {} for spec in specs}
    for dimension in side.dimensions:
        entries = [
            ShareInput(
                name=spec.name,
                min=spec.min[side].get(dimension),
                max=spec.max[side].get(dimension),
                weight=spec.weight[side].get(dimension),
                demand=demand[spec.quota_id].get(dimension),
                lend=spec.lend_idle_min,
            )
            for spec in specs
        ]
        current = runtime_1d(capacity.get(dimension), entries)
        for index, spec in enumerate(specs):
            entry = entries[index]
            if entry.demand >= entry.max:
                hungry = current[spec.name]
            else:
                changed = list(entries)
                changed[index] = replace(entry, demand=entry.max)
                hungry = runtime_1d(capacity.get(dimension), changed)[spec.name]
            room = min(hungry, entry.max) - used[spec.quota_id].get(dimension)
            result[spec.quota_id][dimension] = max(0, room)
    return {quota_id: Resources.from_mapping(values) for quota_id, values in result.items()}


def _compute(
    *,
    group_id: int,
    group_name: str,
    allow_overcommitted_min: bool,
    capacity: GroupCapacity,
    specs: tuple[QuotaSpec, ...],
    workloads: tuple[WorkloadUsage, ...],
    totals: Totals,
    headroom: bool,
) -> GroupSnapshot:
    sides: dict[Side, dict[int, SideUsage]] = {}
    for side in SIDES:
        side_capacity = capacity.side(side)
        used = totals[side]["used"]
        pending = totals[side]["pending"]
        demand = {spec.quota_id: used[spec.quota_id] + pending[spec.quota_id] for spec in specs}
        runtime = _side_runtimes(side_capacity, specs, side, demand)
        sides[side] = {}
        rooms = _headrooms(side_capacity, specs, side, demand, used) if headroom else {}
        for spec in specs:
            room = rooms.get(spec.quota_id, Resources())
            sides[side][spec.quota_id] = SideUsage(
                min=spec.min[side],
                max=spec.max[side],
                weight=spec.weight[side],
                used=used[spec.quota_id],
                pending=pending[spec.quota_id],
                demand=demand[spec.quota_id],
                runtime=runtime[spec.name],
                nonpreemptible_used=totals[side]["nonpreemptible"][spec.quota_id],
                headroom=room,
            )
    quotas = {
        spec.quota_id: QuotaUsage(
            spec=spec, gpu=sides[Side.GPU][spec.quota_id], cpu=sides[Side.CPU][spec.quota_id]
        )
        for spec in specs
    }
    return GroupSnapshot(
        group_id=group_id,
        group_name=group_name,
        allow_overcommitted_min=allow_overcommitted_min,
        capacity=capacity,
        specs=specs,
        workloads=workloads,
        quotas=quotas,
        totals=totals,
        has_headroom=headroom,
        pending_ids=frozenset(w.workload_id for w in workloads if not w.active and w.workload_id),
    )


def build_snapshot(
    *,
    group_id: int,
    group_name: str,
    allow_overcommitted_min: bool,
    capacity: GroupCapacity,
    specs: Sequence[QuotaSpec],
    workloads: Sequence[WorkloadUsage],
    headroom: bool = True,
) -> GroupSnapshot:
    """Pure: compute every quota's used, pending, demand, runtime (and headroom) on both sides.

    `headroom=False` skips the headroom (one extra runtime computation per quota and side), for callers
    that only admit or reclaim.
    """
    ordered_specs = tuple(sorted(specs, key=lambda s: s.name))
    totals = _empty_totals(spec.quota_id for spec in ordered_specs)
    kept = tuple(
        sorted(
            (w for w in workloads if w.quota_id in totals[Side.GPU]["used"]),
            key=lambda w: (w.quota_id, w.workload_id),
        )
    )
    for w in kept:
        _add(totals, w, 1)
    return _compute(
        group_id=group_id,
        group_name=group_name,
        allow_overcommitted_min=allow_overcommitted_min,
        capacity=capacity,
        specs=ordered_specs,
        workloads=kept,
        totals=totals,
        headroom=headroom,
    )


def _workload_rows(group: QuotaGroup) -> list[WorkloadUsage]:
    from scheduling.choices import ACTIVE_STATES, WorkloadState
    from scheduling.models import Workload

    rows = (
        Workload.objects.filter(
            quota__group=group, state__in=[WorkloadState.PENDING, *ACTIVE_STATES]
        )
        .select_related("gang")
        .order_by("id")
    )
    return [usage_of(w) for w in rows]


def group_snapshot(group: QuotaGroup | int, *, headroom: bool = True) -> GroupSnapshot:
    """Read the group's capacity, quotas and live workloads and compute the snapshot.

    Workloads in state PLACED or RUNNING count as used, PENDING as pending demand; a workload with a GPU is
    charged to the GPU side, a CPU-only one to the CPU side. Read-only; takes no locks. `headroom=False`
    skips the per-quota headroom (what people read on the pages) for scheduling cycles with many quotas.
    """
    if not isinstance(group, QuotaGroup):
        group = QuotaGroup.objects.get(pk=group)
    specs = [QuotaSpec.of(q) for q in group.quotas.select_related("tenant").order_by("name")]
    return build_snapshot(
        group_id=int(group.pk),
        group_name=group.name,
        allow_overcommitted_min=group.allow_overcommitted_min,
        capacity=group_capacity(group),
        specs=specs,
        workloads=_workload_rows(group),
        headroom=headroom,
    )
