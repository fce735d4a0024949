"""Engine snapshots of a shard (a quota group): the group's nodes as a `ClusterState` with every active
placement applied, cached per worker process and rebuilt when `Shard.version` moves.

Every change to inventory (cordon, health, nodes) or to placements (placed, released) bumps the version of
the shards whose nodes it touched (`bump_shards_for_nodes`, `bump_all_shards`); a cycle that finds its
cached snapshot at the current version skips the rebuild (the costly part on a 5,000-node cluster).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import F

from core.placement import (
    GPU_MILLI,
    Assignment,
    ClusterState,
    GpuSpec,
    NodeSpec,
    PlacementRequest,
    ReservationPolicy,
)
from core.placement import TopologyPolicy as EngineTopology
from quotas.models import QuotaGroup
from quotas.usage import matching_node_ids
from scheduling.choices import ACTIVE_STATES
from scheduling.models import Gpu, Node, Placement, PlacementGpu, Shard, Workload

logger = logging.getLogger(__name__)

#: How many recently placed requests of a shard shape its target workload (with the pending ones).
RECENT_SHAPES = 2000

#: Taint effects that keep new work off a node (Tessera workloads carry no tolerations).
BLOCKING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


def node_matches(labels: Mapping[str, Any], selector: Mapping[str, Any]) -> bool:
    """True when a node's labels carry every key/value of a group's node selector (empty = all nodes)."""
    return all(str(labels.get(k)) == str(v) for k, v in (selector or {}).items())


def is_tainted(taints: Iterable[Any]) -> bool:
    """True when a taint blocks scheduling: "key=value:NoSchedule" strings or {"effect": ...} dicts."""
    for t in taints or ():
        effect = t.get("effect", "") if isinstance(t, dict) else str(t).rpartition(":")[2]
        if effect in BLOCKING_TAINT_EFFECTS:
            return True
    return False


def schedulable(node: Node) -> bool:
    """New work may land on the node: not cordoned, healthy, no blocking taint."""
    return not node.cordoned and node.healthy and not is_tainted(node.taints)


def group_nodes(group: QuotaGroup) -> list[Node]:
    """The nodes of a group's pool, by name: the ones counted toward it (quotas.usage.matching_nodes; a
    node two groups match belongs to the oldest only, so two shards never place on it)."""
    return list(Node.objects.filter(pk__in=matching_node_ids(group)).order_by("name"))


def groups_for_nodes(node_labels: Iterable[Mapping[str, Any]]) -> list[int]:
    """Ids of the groups whose node selector matches at least one of the given nodes' labels."""
    labels = list(node_labels)
    return [
        g.pk
        for g in QuotaGroup.objects.all()
        if any(node_matches(lab, g.node_selector or {}) for lab in labels)
    ]


def ensure_shard(group_id: int) -> Shard:
    shard, _ = Shard.objects.get_or_create(group_id=group_id)
    return shard


def bump_shards(group_ids: Iterable[int]) -> None:
    """Invalidate the cached snapshots of these shards (their inventory or placements changed)."""
    ids = sorted(set(group_ids))
    if not ids:
        return
    for gid in ids:
        ensure_shard(gid)
    Shard.objects.filter(group_id__in=ids).update(version=F("version") + 1)


def bump_shards_for_nodes(node_ids: Iterable[int]) -> None:
    nodes = list(Node.objects.filter(pk__in=set(node_ids)).values_list("labels", flat=True))
    bump_shards(groups_for_nodes(nodes))


def bump_all_shards() -> None:
    bump_shards(QuotaGroup.objects.values_list("pk", flat=True))


def reservation_policy() -> ReservationPolicy:
    return ReservationPolicy(
        gpu_node_cpu_fraction=float(settings.TESSERA_GPU_NODE_CPU_RESERVED_FRACTION),
        gpu_node_memory_fraction=float(settings.TESSERA_GPU_NODE_MEMORY_RESERVED_FRACTION),
    )


def node_spec(node: Node, gpus: list[Gpu]) -> NodeSpec:
    return NodeSpec(
        name=node.name,
        cpu_milli=int(node.cpu_milli),
        memory_mib=int(node.memory_mib),
        gpus=tuple(
            GpuSpec(
                index=g.index,
                model=g.model,
                memory_mib=g.memory_mib,
                numa_node=g.numa_node,
                nvlink_group=g.nvlink_group,
                healthy=g.healthy and node.healthy,
                uuid=g.uuid,
            )
            for g in sorted(gpus, key=lambda g: g.index)
        ),
        gpu_model=node.gpu_model,
        labels=tuple(sorted((str(k), str(v)) for k, v in (node.labels or {}).items())),
        schedulable=schedulable(node),
    )


def workload_request(w: Workload) -> PlacementRequest:
    """The engine request of a workload (request id = the workload pk)."""
    return PlacementRequest(
        request_id=str(w.pk),
        cpu_milli=w.cpu_milli,
        memory_mib=w.memory_mib,
        gpu_count=w.gpu_count,
        gpu_milli=w.gpu_milli if w.gpu_count else 0,
        gpu_memory_mib=w.gpu_memory_mib if w.gpu_count else 0,
        gpu_models=tuple(w.gpu_models or ()),
        node_labels=tuple(sorted((str(k), str(v)) for k, v in (w.node_labels or {}).items())),
        topology=EngineTopology(w.topology or "none"),
        priority=w.priority,
    )


@dataclass
class GroupCluster:
    """The engine state of one group's nodes with current placements applied, and index maps back to rows.

    `state` must not be mutated by callers (copy it); `version` is the Shard.version it reflects.
    """

    group_id: int
    version: int
    state: ClusterState
    nodes: dict[str, Node]
    gpu_ids: dict[tuple[str, int], int]
    gpu_memory: dict[tuple[str, int], int]
    applied: dict[int, Assignment] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    #: The last requests placed on the shard (the target workload of FGD/Tessera is built from them
    #: and the pending ones).
    recent: deque[PlacementRequest] = field(default_factory=lambda: deque(maxlen=RECENT_SHAPES))

    def node_by_name(self, name: str) -> Node:
        return self.nodes[name]

    def gpu_id(self, node_name: str, index: int) -> int:
        return self.gpu_ids[(node_name, index)]


def build_group_cluster(group: QuotaGroup, version: int) -> GroupCluster:
    """Read the group's nodes, GPUs and active placements and build a fresh engine state."""
    nodes = group_nodes(group)
    by_id = {n.pk: n for n in nodes}
    gpus_by_node: dict[int, list[Gpu]] = {n.pk: [] for n in nodes}
    for g in Gpu.objects.filter(node_id__in=by_id).order_by("node_id", "index"):
        gpus_by_node[g.node_id].append(g)
    state = ClusterState.from_nodes(
        [node_spec(n, gpus_by_node[n.pk]) for n in nodes], reservation_policy()
    )
    gpu_ids: dict[tuple[str, int], int] = {}
    gpu_memory: dict[tuple[str, int], int] = {}
    gpu_index_by_id: dict[int, int] = {}
    for n in nodes:
        for g in gpus_by_node[n.pk]:
            gpu_ids[(n.name, g.index)] = g.pk
            gpu_memory[(n.name, g.index)] = g.memory_mib
            gpu_index_by_id[g.pk] = g.index
    cluster = GroupCluster(
        group.pk, version, state, {n.name: n for n in nodes}, gpu_ids, gpu_memory
    )
    placements = list(
        Placement.objects.filter(released_at__isnull=True, node_id__in=by_id).values_list(
            "pk", "workload_id", "node_id", "cpu_milli", "memory_mib"
        )
    )
    shares: dict[int, list[tuple[int, int, int]]] = {}
    for pid, gid, milli, mem in PlacementGpu.objects.filter(
        placement__released_at__isnull=True, placement__node_id__in=by_id
    ).values_list("placement_id", "gpu_id", "gpu_milli", "gpu_memory_mib"):
        shares.setdefault(pid, []).append((gpu_index_by_id[gid], milli, mem))
    for pid, wid, node_id, cpu, mem in placements:
        held = sorted(shares.get(pid, []))
        a = Assignment(
            request_id=str(wid),
            node=by_id[node_id].name,
            gpu_indices=tuple(i for i, _, _ in held),
            gpu_milli=held[0][1] if held else 0,
            gpu_memory_mib=held[0][2] if held else 0,
            cpu_milli=cpu,
            memory_mib=mem,
        )
        try:
            state.apply(a)
            cluster.applied[wid] = a
        except (
            ValueError
        ) as exc:  # drift (e.g. an unhealthy GPU still held): the reconciler fixes it
            cluster.skipped.append(str(exc))
            logger.warning("snapshot of group %s: placement %s not applied: %s", group, pid, exc)
    return cluster


_cache: dict[int, GroupCluster] = {}
_cache_lock = threading.Lock()


def cached_group_cluster(group: QuotaGroup, version: int) -> tuple[GroupCluster, bool]:
    """The worker's snapshot of a group at `version` (rebuilt when stale). Returns (cluster, was_cached)."""
    with _cache_lock:
        hit = _cache.get(group.pk)
    if hit is not None and hit.version == version:
        return hit, True
    cluster = build_group_cluster(group, version)
    with _cache_lock:
        _cache[group.pk] = cluster
    return cluster, False


def remember(cluster: GroupCluster) -> None:
    with _cache_lock:
        _cache[cluster.group_id] = cluster


def forget(group_id: int | None = None) -> None:
    """Drop the cached snapshot of a group (or every group)."""
    with _cache_lock:
        if group_id is None:
            _cache.clear()
        else:
            _cache.pop(group_id, None)


def snapshot_for_group(group: QuotaGroup) -> GroupCluster:
    """The engine `ClusterState` of the group's nodes with current placements applied, plus index maps
    (node name ↔ Node, (node name, GPU index) ↔ Gpu id). Read-only for callers."""
    shard = ensure_shard(group.pk)
    cluster, _ = cached_group_cluster(group, shard.version)
    return cluster


def active_assignment_amounts(a: Assignment) -> tuple[int, int]:
    """(total GPU milli, total GPU memory MiB) an assignment holds."""
    n = len(a.gpu_indices)
    return n * min(a.gpu_milli, GPU_MILLI), n * a.gpu_memory_mib


def active_workload_ids_on_nodes(node_ids: Iterable[int]) -> list[int]:
    return list(
        Workload.objects.filter(
            state__in=ACTIVE_STATES,
            placements__released_at__isnull=True,
            placements__node_id__in=list(node_ids),
        ).values_list("pk", flat=True)
    )
