"""Read models of the cluster pages and API: who holds which GPU slice, per-node allocation, totals.

Workloads of tenants the viewer cannot see are shown by size only ("another team"), so the cluster page
never leaks names across tenants; operators see everything.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Q, Sum

from core.placement.mig_profiles import MEMORY_SLICES, mig_geometry
from core.units import MILLI_PER_GPU, milli_to_percent
from portal.scoping import is_operator, tenant_ids_for
from scheduling.models import Gpu, Node, Placement, PlacementGpu
from scheduling.services.mig_cards import mig_model
from scheduling.services.snapshot import schedulable

HIDDEN = "another team"


def gpu_shares(gpu_ids: Iterable[int], user: Any) -> dict[int, list[dict[str, Any]]]:
    """Active slices per GPU: workload id/name/tenant (hidden for other tenants), milli and MiB."""
    ops = is_operator(user)
    mine = tenant_ids_for(user)
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    rows = (
        PlacementGpu.objects.filter(gpu_id__in=list(gpu_ids), placement__released_at__isnull=True)
        .select_related("placement__workload", "placement__tenant")
        .order_by("gpu_id", "placement__created_at", "pk")
    )
    for s in rows:
        w = s.placement.workload
        visible = ops or s.placement.tenant_id in mine
        out[s.gpu_id].append(
            {
                "workload": w.pk if visible else None,
                "name": w.name if visible else HIDDEN,
                "tenant": s.placement.tenant.slug if visible else HIDDEN,
                "gpu_milli": s.gpu_milli,
                "gpu_memory_mib": s.gpu_memory_mib,
                "mig_profile": s.mig_profile,
                "mig_start": s.mig_start,
            }
        )
    return dict(out)


@dataclass
class GpuRow:
    gpu: Gpu
    shares: list[dict[str, Any]]
    used_milli: int
    used_memory_mib: int
    segments: list[dict[str, Any]] = field(default_factory=list)

    @property
    def free_milli(self) -> int:
        return max(0, MILLI_PER_GPU - self.used_milli)

    @property
    def mig_layout(self) -> list[dict[str, Any]]:
        """The card's MIG instances by position, as blocks over its memory slices (``[]`` when no MIG
        instance is on it): ``{"start", "span", "profile", "name"}``, a free run has profile ``""``."""
        instances = [s for s in self.shares if s.get("mig_start") is not None]
        geometry = mig_geometry(mig_model(self.gpu.model, self.gpu.memory_mib))
        if not instances or geometry is None:
            return []
        blocks: list[dict[str, Any]] = []
        taken: dict[int, dict[str, Any]] = {}
        for s in instances:
            profile = geometry.profile(s["mig_profile"])
            span = profile.memory_slices if profile is not None else 1
            taken[int(s["mig_start"])] = {
                "start": int(s["mig_start"]),
                "span": span,
                "profile": s["mig_profile"],
                "name": s["name"],
            }
        position = 0
        while position < MEMORY_SLICES:
            if position in taken:
                blocks.append(taken[position])
                position += taken[position]["span"]
                continue
            end = position + 1
            while end < MEMORY_SLICES and end not in taken:
                end += 1
            blocks.append({"start": position, "span": end - position, "profile": "", "name": ""})
            position = end
        return blocks


@dataclass
class NodeRow:
    node: Node
    schedulable: bool
    gpus: list[GpuRow]
    allocated_cpu_milli: int
    allocated_memory_mib: int
    workloads: int

    @property
    def cpu_percent(self) -> int:
        return (
            round(100 * self.allocated_cpu_milli / self.node.cpu_milli)
            if self.node.cpu_milli
            else 0
        )

    @property
    def gpu_used_milli(self) -> int:
        return sum(g.used_milli for g in self.gpus)


def _segments(shares: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bar segments (percent of the card) per slice, with a stable colour slot per tenant."""
    out = []
    for s in shares:
        slot = sum(ord(c) for c in s["tenant"]) % 8 if s["tenant"] != HIDDEN else "x"
        out.append({**s, "percent": round(milli_to_percent(s["gpu_milli"]), 1), "slot": slot})
    return out


def node_rows(user: Any, nodes: Iterable[Node] | None = None) -> list[NodeRow]:
    """Nodes with their GPUs, each GPU's slices and the node's allocated CPU/memory."""
    nodes = list(nodes if nodes is not None else Node.objects.order_by("name"))
    ids = [n.pk for n in nodes]
    gpus_by_node: dict[int, list[Gpu]] = defaultdict(list)
    for g in Gpu.objects.filter(node_id__in=ids).order_by("node_id", "index"):
        gpus_by_node[g.node_id].append(g)
    shares = gpu_shares([g.pk for gs in gpus_by_node.values() for g in gs], user)
    alloc = {
        r["node_id"]: r
        for r in Placement.objects.filter(released_at__isnull=True, node_id__in=ids)
        .values("node_id")
        .annotate(c=Sum("cpu_milli"), m=Sum("memory_mib"), n=Count("pk"))
    }
    rows = []
    for n in nodes:
        grows = []
        for g in gpus_by_node[n.pk]:
            sh = shares.get(g.pk, [])
            grows.append(
                GpuRow(
                    g,
                    sh,
                    sum(s["gpu_milli"] for s in sh),
                    sum(s["gpu_memory_mib"] for s in sh),
                    _segments(sh),
                )
            )
        a = alloc.get(n.pk, {})
        rows.append(
            NodeRow(
                n,
                schedulable(n),
                grows,
                int(a.get("c") or 0),
                int(a.get("m") or 0),
                int(a.get("n") or 0),
            )
        )
    return rows


def cluster_totals(pool: str | None = None) -> dict[str, int]:
    """Headline numbers of the cluster page (of one pool when given)."""
    node_qs = Node.objects.filter(pool=pool) if pool else Node.objects.all()
    gpus = Gpu.objects.filter(node__in=node_qs).aggregate(
        total=Count("pk"), healthy=Count("pk", filter=Q(healthy=True))
    )
    used = PlacementGpu.objects.filter(
        placement__released_at__isnull=True, placement__node__in=node_qs
    ).aggregate(m=Sum("gpu_milli"))
    nodes = node_qs.aggregate(
        total=Count("pk"),
        cordoned=Count("pk", filter=Q(cordoned=True)),
        unhealthy=Count("pk", filter=Q(healthy=False)),
    )
    return {
        "nodes": nodes["total"] or 0,
        "cordoned": nodes["cordoned"] or 0,
        "unhealthy_nodes": nodes["unhealthy"] or 0,
        "gpus": gpus["total"] or 0,
        "healthy_gpus": gpus["healthy"] or 0,
        "gpu_milli_used": int(used["m"] or 0),
        "placements": Placement.objects.filter(released_at__isnull=True, node__in=node_qs).count(),
    }
