"""Group snapshots: capacity, and per quota and side the used / pending / demand / runtime / headroom.

`group_snapshot(group)` reads the database once (nodes, GPUs, quotas, workloads of the group) and returns an
immutable `GroupSnapshot`; everything after that is pure (`build_snapshot`), so admission, reclaim and the
what-if preview recompute runtimes on modified copies without touching the database.

Capacity (docs/quotas.md "Capacity"): only nodes whose labels contain every pair of the group's
`node_selector` and that no older group claims (a node counts toward one group: docs/quotas.md "Groups
never share a node"), that are not cordoned and are healthy, count.
- GPU side: 1000 milli and the memory of every healthy GPU, plus all CPU and memory of GPU nodes (nodes
  with at least one healthy GPU).
- CPU side: all CPU and memory of CPU-only nodes, plus the CPU and memory of GPU nodes minus the
  reservation kept for GPU work there (the node's `Reservation` row, else
  `TESSERA_GPU_NODE_CPU_RESERVED_FRACTION` / `TESSERA_GPU_NODE_MEMORY_RESERVED_FRACTION`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, F, Q, QuerySet, Sum
from django.utils import timezone

from core.units import MILLI_PER_GPU, WHOLE_CARD_MILLI
from quotas.cluster import cluster_rows
from quotas.fairness import BudgetState, EqualShare, FairShare, LoanEffect, UserCap
from quotas.models import Quota, QuotaGroup
from quotas.resources import Resources, Side, total
from quotas.runtime import QuotaShareInput, ShareInput, runtime_1d, runtime_shares
from quotas.time_inputs import TimeInputs, time_inputs

SIDES = (Side.GPU, Side.CPU)

logger = logging.getLogger(__name__)


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
    overlaps: tuple[NodeOverlap, ...] = ()
    """Nodes the group's selector matches that another group matches too (counted in one of them)."""

    def side(self, side: Side | str) -> Resources:
        return self.gpu if Side(side) is Side.GPU else self.cpu


def node_matches(labels: dict[str, Any] | None, selector: dict[str, Any] | None) -> bool:
    """True when `labels` contains every key/value pair of `selector` (an empty selector matches all)."""
    labels = labels or {}
    return all(str(labels.get(key)) == str(value) for key, value in (selector or {}).items())


def selectors_overlap(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """True when one node could match both selectors: they give no key two different values (so a node
    carrying both sets of labels matches both; an empty selector overlaps every other)."""
    a, b = a or {}, b or {}
    return all(str(a[key]) == str(b[key]) for key in a.keys() & b.keys())


def claim_order(groups: Iterable[QuotaGroup]) -> list[QuotaGroup]:
    """Groups in the order they claim a node two of them match: oldest first (`created_at`, then pk; an
    unsaved group last). A node counts toward the first group of this order that matches it."""
    return sorted(
        groups,
        key=lambda g: (
            g.created_at is None,
            g.created_at.timestamp() if g.created_at else 0,
            g.pk or 0,
        ),
    )


@dataclass(frozen=True, slots=True)
class NodeOverlap:
    """A node that several groups' selectors match: `groups` in claim order, `counted_in` the first."""

    node: str
    groups: tuple[str, ...]
    counted_in: str


def _claims(group: QuotaGroup, nodes: Any) -> tuple[list[Any], tuple[NodeOverlap, ...]]:
    """Of the Node queryset `nodes`: the rows `group` counts (its selector matches them and no older group
    claims them), and every matching row that another group matches too."""
    selector = {str(key): str(value) for key, value in (group.node_selector or {}).items()}
    if selector and connection.vendor == "postgresql":
        nodes = nodes.filter(labels__contains=selector)  # narrows in SQL; the check below decides
    others = QuotaGroup.objects.exclude(pk=group.pk) if group.pk else QuotaGroup.objects.all()
    ordered = claim_order([group, *others])
    owned, overlaps = [], []
    for node in nodes:
        if not node_matches(node.labels, selector):
            continue
        claimants = [g for g in ordered if g is group or node_matches(node.labels, g.node_selector)]
        if claimants[0] is group:
            owned.append(node)
        if len(claimants) > 1:
            overlaps.append(
                NodeOverlap(node.name, tuple(g.name for g in claimants), claimants[0].name)
            )
    return owned, tuple(overlaps)


def matching_nodes(group: QuotaGroup) -> list[Any]:
    """The Node rows counted toward the group (all of them, cordoned or not): those its `node_selector`
    matches, except the ones an older group matches too (a node counts toward one group only)."""
    return _claims(group, cluster_rows().nodes().prefetch_related("gpus").order_by("name"))[0]


def matching_node_ids(group: QuotaGroup) -> list[int]:
    """The primary keys of `matching_nodes(group)`, read without their GPUs."""
    return [
        node.pk for node in _claims(group, cluster_rows().nodes().only("pk", "name", "labels"))[0]
    ]


def node_overlaps(group: QuotaGroup) -> tuple[NodeOverlap, ...]:
    """The nodes the group's selector matches that another group matches too, by name."""
    return _claims(group, cluster_rows().nodes().only("pk", "name", "labels").order_by("name"))[1]


def nodes_matching_both(selector: dict[str, Any], others: Sequence[dict[str, Any]]) -> list[str]:
    """Names of the nodes `selector` matches that one of the `others` selectors matches too."""
    return [
        name
        for name, labels in cluster_rows().nodes().order_by("name").values_list("name", "labels")
        if node_matches(labels, selector) and any(node_matches(labels, o) for o in others)
    ]


def all_overlaps(node_names: Iterable[str] | None = None) -> list[NodeOverlap]:
    """Every node (of `node_names`, when given) that several groups match, by name."""
    ordered = claim_order(QuotaGroup.objects.all())
    nodes = cluster_rows().nodes().order_by("name")
    if node_names is not None:
        nodes = nodes.filter(name__in=list(node_names))
    found = []
    for name, labels in nodes.values_list("name", "labels"):
        claimants = [g.name for g in ordered if node_matches(labels, g.node_selector)]
        if len(claimants) > 1:
            found.append(NodeOverlap(name, tuple(claimants), claimants[0]))
    return found


def log_overlaps(node_names: Iterable[str] | None = None) -> list[NodeOverlap]:
    """Warn operators (log) about every node (of `node_names`) that several groups match."""
    found = all_overlaps(node_names)
    for overlap in found:
        logger.warning(
            "Node %s is selected by several quota groups (%s); it counts toward %s only.",
            overlap.node,
            ", ".join(overlap.groups),
            overlap.counted_in,
        )
    return found


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
    overlaps: tuple[NodeOverlap, ...] = ()
    if nodes is None:
        nodes, overlaps = _claims(
            group, cluster_rows().nodes().prefetch_related("gpus").order_by("name")
        )
    reservations = cluster_rows().reservations([n.pk for n in nodes])
    gpu_side = Resources()
    cpu_side = Resources()
    counted = excluded = healthy_gpus = unhealthy_gpus = 0
    for node in nodes:
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
                    gpu_milli=MILLI_PER_GPU * len(healthy),
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
        overlaps=overlaps,
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
    owner_id: int | None = None


def workload_side(workload: Any) -> Side:
    """GPU side when the workload uses a GPU, CPU side otherwise."""
    return Side.GPU if int(getattr(workload, "gpu_count", 0) or 0) > 0 else Side.CPU


def charged_gpu_memory_mib(workload: Any) -> int:
    """The GPU memory charged per GPU of a workload: the memory of a slice, and for whole cards
    `whole_card_memory_mib` (the card it holds once placed, the largest card it may be placed on while
    pending: see scheduling.services.charge). The one rule."""
    if int(getattr(workload, "gpu_milli", 0) or 0) >= WHOLE_CARD_MILLI:
        return int(getattr(workload, "whole_card_memory_mib", 0) or 0)
    return int(getattr(workload, "gpu_memory_mib", 0) or 0)


def workload_resources(workload: Any) -> Resources:
    """What a workload is charged to its quota: per-GPU milli and charged memory
    (`charged_gpu_memory_mib`) times its GPU count, its CPU and memory. Admission, usage, the preview and
    the API all read it; for a placed workload it equals its placement in every dimension."""
    gpu_count = int(getattr(workload, "gpu_count", 0) or 0)
    return Resources(
        gpu_milli=gpu_count * int(getattr(workload, "gpu_milli", 0) or 0),
        gpu_memory_mib=gpu_count * charged_gpu_memory_mib(workload),
        cpu_milli=int(workload.cpu_milli or 0),
        memory_mib=int(workload.memory_mib or 0),
    )


def usage_of(workload: Any) -> WorkloadUsage:
    """A WorkloadUsage for a Workload row (saved or not), or any object with its fields (a gang's name as
    `gang_name`, or read from `gang`)."""
    gang_name = getattr(workload, "gang_name", None)
    if gang_name is None:
        gang = getattr(workload, "gang", None) if getattr(workload, "gang_id", None) else None
        gang_name = gang.name if gang is not None else ""
    return WorkloadUsage(
        workload_id=int(workload.pk or 0),
        name=str(workload.name),
        kind=str(workload.kind),
        quota_id=int(workload.quota_id),
        side=workload_side(workload),
        resources=workload_resources(workload),
        active=workload.state in cluster_rows().active_states,
        priority=int(workload.priority or 0),
        preemptible=bool(workload.preemptible),
        gang_id=workload.gang_id,
        gang_name=gang_name,
        started_at=workload.started_at or workload.placed_at,
        owner_id=getattr(workload, "owner_id", None),
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
    fair_share: FairShare | None = None
    """The quota's decayed fair share when its group has it on (quotas.fair_share), else None."""
    budget: BudgetState | None = None
    """Its binding GPU-hour budget in the current period (quotas.budgets), else None."""
    loans: tuple[LoanEffect, ...] = ()
    """Active loans that moved min to or from it (already applied to `min` and `max`)."""
    user_cap: UserCap | None = None
    """Its per-person GPU cap and what each person holds (quotas.admission), else None."""
    equal_share: EqualShare | None = None
    """Its equal share of borrowing among active users, when on (quotas.admission), else None."""

    @property
    def borrow_tier(self) -> int:
        return self.fair_share.tier if self.fair_share is not None else 0

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


def _add_all(totals: Totals, workloads: Iterable[WorkloadUsage]) -> None:
    """`_add(totals, w, 1)` for each of `workloads`, summed per bucket in plain ints first (a snapshot of
    a large group adds thousands)."""
    sums: dict[tuple[Side, str, int], list[int]] = {}

    def add(key: tuple[Side, str, int], g: int, gm: int, c: int, m: int) -> None:
        acc = sums.get(key)
        if acc is None:
            sums[key] = [g, gm, c, m]
        else:
            acc[0] += g
            acc[1] += gm
            acc[2] += c
            acc[3] += m

    for w in workloads:
        side = w.side
        if w.quota_id not in totals[side]["used"]:
            continue
        r = w.resources
        g, gm = (r.gpu_milli, r.gpu_memory_mib) if side is Side.GPU else (0, 0)
        add((side, "used" if w.active else "pending", w.quota_id), g, gm, r.cpu_milli, r.memory_mib)
        if w.active and not w.preemptible:
            add((side, "nonpreemptible", w.quota_id), g, gm, r.cpu_milli, r.memory_mib)
    for (side, kind, quota_id), (g, gm, c, m) in sums.items():
        bucket = totals[side][kind]
        bucket[quota_id] = bucket[quota_id] + Resources(g, gm, c, m)


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
                tier=spec.borrow_tier,
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
                tier=spec.borrow_tier,
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
    _add_all(totals, kept)
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


@dataclass(frozen=True, slots=True)
class _WorkloadFields:
    """The fields of a Workload row `usage_of` reads (read with `values()`, no model instances)."""

    pk: int
    name: str
    kind: str
    quota_id: int
    state: str
    gpu_count: int
    gpu_milli: int
    gpu_memory_mib: int
    whole_card_memory_mib: int
    cpu_milli: int
    memory_mib: int
    priority: int = 0
    preemptible: bool = True
    gang_id: int | None = None
    gang_name: str = ""
    started_at: datetime | None = None
    placed_at: datetime | None = None


_SHAPE = (
    "quota_id",
    "state",
    "preemptible",
    "gpu_count",
    "gpu_milli",
    "gpu_memory_mib",
    "whole_card_memory_mib",
)
"""The fields that decide what a workload is charged and to which bucket (`aggregated_usage` groups by
them)."""


HELD_BACK_CODES = ("user_cap", "budget_exhausted")
"""Waiting codes (quotas.admission.AdmissionCode USER_CAP, BUDGET_EXHAUSTED) of work held back by its own
team's limit, a person's GPU cap or a spent GPU-hour budget: more capacity would not start it."""


def _live_workloads(group: QuotaGroup | int) -> QuerySet[Any]:
    """The group's live workloads: PENDING (demand) and active (used); the one definition of both is
    the scheduling app's (`quotas.cluster.ClusterRows.charged_workloads`). Waiting work the last cycle
    held back by a person's cap or a spent budget (HELD_BACK_CODES) is not demand: counted, it kept the
    team's share of borrowing (even its idle min) from siblings that could use it, while nothing of it
    could start. Admission still counts each request it checks in the demand, so the work is admitted
    (and may reclaim within min) as soon as its limit allows."""
    group_id = group if isinstance(group, int) else group.pk
    rows = cluster_rows()
    return rows.charged_workloads(int(group_id)).exclude(
        ~Q(state__in=rows.active_states) & Q(pending_code__in=HELD_BACK_CODES)
    )


def live_usage(group: QuotaGroup | int) -> list[WorkloadUsage]:
    """One WorkloadUsage per live workload of the group, by id: what `usage_of` makes of each row,
    built straight from the row's columns (a reclaim on a 16,000-workload group reads every one, and
    `usage_of`'s attribute lookups cost several times the row itself)."""
    return _usages(_live_workloads(group))


def pending_usage(group: QuotaGroup | int) -> list[WorkloadUsage]:
    """`live_usage` of the group's live workloads that are not active (its demand), by id."""
    return _usages(_live_workloads(group).exclude(state__in=cluster_rows().active_states))


_ROWS_PER_QUERY = 5000
"""Ids per `IN (...)` list (SQLite refuses more than 32,766 parameters in one statement)."""


def active_usage(
    group: QuotaGroup | int, ids: Collection[int], gangs: Collection[int] = ()
) -> list[WorkloadUsage]:
    """`live_usage` of the group's active workloads among `ids`, and of every active member of their
    gangs and of `gangs`, by id: the rows a reclaim weighs on the nodes it looks at, each gang whole."""
    active = _live_workloads(group).filter(state__in=cluster_rows().active_states)
    wanted = sorted(set(ids))
    gang_ids = set(gangs)
    by_id: dict[int, WorkloadUsage] = {}
    for start in range(0, len(wanted), _ROWS_PER_QUERY):
        for usage in _usages(active.filter(pk__in=wanted[start : start + _ROWS_PER_QUERY])):
            by_id[usage.workload_id] = usage
            if usage.gang_id:
                gang_ids.add(usage.gang_id)
    ordered = sorted(gang_ids)
    for start in range(0, len(ordered), _ROWS_PER_QUERY):
        for usage in _usages(active.filter(gang_id__in=ordered[start : start + _ROWS_PER_QUERY])):
            by_id[usage.workload_id] = usage
    return [by_id[i] for i in sorted(by_id)]


def lowest_preemptible(group: QuotaGroup | int, other_than: int) -> tuple[int, int] | None:
    """(the lowest priority, the least GPU milli of a workload at it) among the group's active
    preemptible workloads outside quota `other_than`; None when there are none. A lower bound on what
    the cheapest unit a reclaim could stop costs (scheduling.services.reclaim_fit)."""
    row = (
        _live_workloads(group)
        .filter(state__in=cluster_rows().active_states, preemptible=True)
        .exclude(quota_id=other_than)
        .annotate(milli=F("gpu_count") * F("gpu_milli"))
        .order_by("priority", "milli")
        .values_list("priority", "milli")
        .first()
    )
    return None if row is None else (int(row[0] or 0), int(row[1] or 0))


def _usages(workloads: QuerySet[Any]) -> list[WorkloadUsage]:
    fields = [f.name for f in _WorkloadFields.__dataclass_fields__.values()]
    columns = [("gang__name" if f == "gang_name" else f) for f in fields]
    rows = workloads.order_by("id").values_list(*columns)
    active_states = frozenset(cluster_rows().active_states)
    gpu, cpu = Side.GPU, Side.CPU
    out = []
    for (
        pk, name, kind, quota_id, state, gpu_count, gpu_milli, gpu_memory_mib, whole_card_mib,
        cpu_milli, memory_mib, priority, preemptible, gang_id, gang_name, started_at, placed_at,
    ) in rows:  # fmt: skip
        count = int(gpu_count or 0)
        milli = int(gpu_milli or 0)
        charged = whole_card_mib if milli >= WHOLE_CARD_MILLI else gpu_memory_mib
        out.append(
            WorkloadUsage(
                int(pk or 0),
                str(name),
                str(kind),
                int(quota_id),
                gpu if count > 0 else cpu,
                Resources(count * milli, count * int(charged or 0), int(cpu_milli or 0),
                          int(memory_mib or 0)),
                state in active_states,
                int(priority or 0),
                bool(preemptible),
                gang_id,
                gang_name or "",
                started_at or placed_at,
                None,
            )
        )  # fmt: skip
    return out


def live_gpu_milli(group: QuotaGroup | int, workload_ids: Iterable[int]) -> int:
    """The GPU milli charged to the group's live workloads among `workload_ids` (workloads that ended
    count nothing): what the reclaim-notices board shows as GPUs under notice."""
    ids = sorted(set(workload_ids))
    if not ids:
        return 0
    rows = _live_workloads(group).filter(pk__in=ids).values_list("gpu_count", "gpu_milli")
    return sum(int(count or 0) * int(milli or 0) for count, milli in rows)


def aggregated_usage(group: QuotaGroup | int, *, active_only: bool = False) -> list[WorkloadUsage]:
    """The group's live workloads summed per (quota, side, active, preemptible): the same used, pending,
    demand and non-preemptible figures as `live_usage`, read with one GROUP BY over request shapes
    instead of one row per workload (a scheduling cycle of a 5,000-workload group). Each shape is charged
    by `usage_of` (so `workload_resources`: the one charge), times the number of its rows. For admission
    only: reclaim needs the individual workloads (`live_usage`). With `active_only`, the active ones
    alone (a reclaim reads the pending ones one by one: `pending_usage`)."""
    live = _live_workloads(group)
    if active_only:
        live = live.filter(state__in=cluster_rows().active_states)
    rows = (
        live.values(*_SHAPE)
        .annotate(n=Count("pk"), cpu=Sum("cpu_milli"), memory=Sum("memory_mib"))
        .order_by()
    )
    shapes = []
    for row in rows:
        shape = _WorkloadFields(
            pk=0, name="(aggregate)", kind="aggregate", cpu_milli=0, memory_mib=0,
            **{key: row[key] for key in _SHAPE},
        )  # fmt: skip
        usage = usage_of(shape)
        charged = usage.resources.scaled(int(row["n"])) + Resources(
            cpu_milli=int(row["cpu"] or 0), memory_mib=int(row["memory"] or 0)
        )
        shapes.append(replace(usage, resources=charged, priority=0, gang_id=None))
    return aggregate(shapes)


def aggregate(usages: Iterable[WorkloadUsage]) -> list[WorkloadUsage]:
    """`usages` summed per (quota, side, active, preemptible), as workloads with negative ids named
    "(aggregate)": a snapshot built from them has the same used, pending, demand, non-preemptible and
    runtime figures as one built from `usages`. Pure."""
    sums: dict[tuple[int, Side, bool, bool], Resources] = {}
    for u in usages:
        key = (u.quota_id, u.side, u.active, u.preemptible)
        sums[key] = sums.get(key, Resources()) + u.resources
    return [
        WorkloadUsage(
            workload_id=-(index + 1),
            name="(aggregate)",
            kind="aggregate",
            quota_id=quota_id,
            side=side,
            resources=resources,
            active=active,
            preemptible=preemptible,
        )
        for index, ((quota_id, side, active, preemptible), resources) in enumerate(
            sorted(sums.items(), key=str)
        )
    ]


def loan_moves(lender: QuotaSpec, gpus: int) -> Resources:
    """What a loan of `gpus` GPUs moves off `lender`'s GPU-side min: 1000 milli per GPU, and the same
    fraction of its min in each other GPU-side dimension (rounded down), never more than the min."""
    minimum = lender.min[Side.GPU]
    if minimum.gpu_milli <= 0:
        return Resources()
    milli = min(MILLI_PER_GPU * gpus, minimum.gpu_milli)
    return Resources(
        gpu_milli=milli,
        gpu_memory_mib=minimum.gpu_memory_mib * milli // minimum.gpu_milli,
        cpu_milli=minimum.cpu_milli * milli // minimum.gpu_milli,
        memory_mib=minimum.memory_mib * milli // minimum.gpu_milli,
    )


def apply_time_inputs(specs: Sequence[QuotaSpec], inputs: TimeInputs) -> list[QuotaSpec]:
    """Pure: `specs` with their fair share and budget attached and active loans applied (the lender's
    GPU-side min goes down by `loan_moves`, the borrower's min and max up by the same)."""
    if inputs.empty:
        return list(specs)
    by_id = {s.quota_id: s for s in specs}
    original = dict(by_id)
    for loan in inputs.loans:
        if loan.lender_id is None and loan.borrower_id in by_id:
            # the operators lend unassigned capacity: only the borrower's min and max grow
            borrower = by_id[loan.borrower_id]
            moved = Resources(gpu_milli=MILLI_PER_GPU * loan.gpus)
            by_id[loan.borrower_id] = replace(
                borrower,
                min={**borrower.min, Side.GPU: borrower.min[Side.GPU] + moved},
                max={**borrower.max, Side.GPU: borrower.max[Side.GPU] + moved},
                loans=(*borrower.loans, loan),
            )
            continue
        if loan.lender_id not in by_id or loan.borrower_id not in by_id:
            continue
        moved = loan_moves(original[loan.lender_id], loan.gpus)
        lender, borrower = by_id[loan.lender_id], by_id[loan.borrower_id]
        by_id[loan.lender_id] = replace(
            lender,
            min={**lender.min, Side.GPU: (lender.min[Side.GPU] - moved).clip()},
            loans=(*lender.loans, loan),
        )
        by_id[loan.borrower_id] = replace(
            borrower,
            min={**borrower.min, Side.GPU: borrower.min[Side.GPU] + moved},
            max={**borrower.max, Side.GPU: borrower.max[Side.GPU] + moved},
            loans=(*borrower.loans, loan),
        )
    return [
        replace(
            spec,
            fair_share=inputs.fair_shares.get(quota_id, spec.fair_share),
            budget=inputs.budgets.get(quota_id, spec.budget),
            user_cap=inputs.user_caps.get(quota_id, spec.user_cap),
            equal_share=inputs.equal_shares.get(quota_id, spec.equal_share),
        )
        for quota_id, spec in by_id.items()
    ]


def group_specs(
    group: QuotaGroup, now: datetime | None = None, *, fair_share_key: object = None
) -> list[QuotaSpec]:
    """The specs of the group's quotas at `now` (default: the clock), fairness over time applied
    (`fair_share_key`: see `quotas.time_inputs.cached_group_fair_shares`)."""
    rows = list(group.quotas.select_related("tenant").order_by("name"))
    specs = [QuotaSpec.of(q) for q in rows]
    inputs = time_inputs(group, now or timezone.now(), rows, fair_share_key=fair_share_key)
    return apply_time_inputs(specs, inputs)


def group_snapshot(group: QuotaGroup | int, *, headroom: bool = True) -> GroupSnapshot:
    """Read the group's capacity, quotas and live workloads and compute the snapshot.

    Workloads in state PLACED or RUNNING count as used, PENDING as pending demand; a workload with a GPU is
    charged to the GPU side, a CPU-only one to the CPU side. Read-only; takes no locks. `headroom=False`
    skips the per-quota headroom (what people read on the pages) for scheduling cycles with many quotas.
    """
    if not isinstance(group, QuotaGroup):
        group = QuotaGroup.objects.get(pk=group)
    specs = group_specs(group)
    return build_snapshot(
        group_id=int(group.pk),
        group_name=group.name,
        allow_overcommitted_min=group.allow_overcommitted_min,
        capacity=group_capacity(group),
        specs=specs,
        workloads=live_usage(group),
        headroom=headroom,
    )
