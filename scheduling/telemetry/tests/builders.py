"""Plain builders of inventory, quotas, workloads and placements for telemetry tests (rows written directly,
so the tests do not depend on the scheduling service's cycle)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from portal.models import Tenant
from quotas.models import Quota, QuotaGroup
from scheduling.models import Gpu, Node, Placement, PlacementGpu, Workload


def make_group(name: str = "a100", selector: dict[str, str] | None = None) -> QuotaGroup:
    group, _ = QuotaGroup.objects.get_or_create(
        name=name, defaults={"node_selector": selector if selector is not None else {"pool": name}}
    )
    return group


def make_node(
    name: str,
    *,
    pool: str = "a100",
    gpus: int = 2,
    model: str = "A100",
    memory_mib: int = 81920,
    unhealthy: Sequence[int] = (),
    healthy: bool = True,
) -> Node:
    node = Node.objects.create(
        name=name,
        pool=pool,
        labels={"pool": pool},
        cpu_milli=64000,
        memory_mib=512000,
        gpu_model=model,
        healthy=healthy,
    )
    for index in range(gpus):
        Gpu.objects.create(
            node=node,
            index=index,
            uuid=f"GPU-{name}-{index}",
            model=model,
            memory_mib=memory_mib,
            healthy=index not in unhealthy,
        )
    return node


def make_quota(group: QuotaGroup, tenant: Tenant) -> Quota:
    quota, _ = Quota.objects.get_or_create(
        group=group, tenant=tenant, defaults={"name": tenant.slug}
    )
    return quota


def make_workload(
    quota: Quota,
    name: str,
    *,
    kind: str = "job_pod",
    profile: str = "training",
    state: str = "running",
    gpu_count: int = 1,
    gpu_milli: int = 1000,
    gpu_memory_mib: int = 0,
    submitted_at: datetime | None = None,
    placed_at: datetime | None = None,
) -> Workload:
    workload = Workload.objects.create(
        tenant=quota.tenant,
        quota=quota,
        kind=kind,
        name=name,
        cpu_milli=1000,
        memory_mib=1024,
        gpu_count=gpu_count,
        gpu_milli=gpu_milli,
        gpu_memory_mib=gpu_memory_mib,
        profile=profile,
        state=state,
    )
    updates: dict[str, Any] = {}
    if submitted_at is not None:
        updates["submitted_at"] = submitted_at
    if placed_at is not None:
        updates["placed_at"] = placed_at
    if updates:
        Workload.objects.filter(pk=workload.pk).update(**updates)
        workload.refresh_from_db()
    return workload


def place(
    workload: Workload,
    node: Node,
    shares: Sequence[tuple[int, int, int]],
    *,
    released: bool = False,
) -> Placement:
    """shares: (gpu index, gpu milli, gpu memory MiB) per GPU."""
    from django.utils import timezone

    placement = Placement.objects.create(
        workload=workload,
        node=node,
        tenant=workload.tenant,
        cpu_milli=workload.cpu_milli,
        memory_mib=workload.memory_mib,
        gpu_milli_total=sum(s[1] for s in shares),
        released_at=timezone.now() if released else None,
    )
    for index, milli, memory in shares:
        PlacementGpu.objects.create(
            placement=placement,
            gpu=node.gpus.get(index=index),
            gpu_milli=milli,
            gpu_memory_mib=memory,
        )
    return placement
