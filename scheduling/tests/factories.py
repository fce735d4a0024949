"""Builders for scheduling tests: a group with the bundled demo cluster or a small cluster, and quotas
with explicit bounds (set through the model fields the quotas app defines)."""

from __future__ import annotations

import itertools
from typing import Any

from portal.models import Tenant
from portal.tests.factories import TenantFactory
from quotas.models import Quota, QuotaGroup
from scheduling import services
from scheduling.backends.base import GpuInventory, NodeInventory
from scheduling.inventory import load_demo_inventory, sync_inventory_rows

_seq = itertools.count(1)
BIG = 10**12


def make_group(name: str = "training", selector: dict[str, str] | None = None) -> QuotaGroup:
    group, _ = QuotaGroup.objects.get_or_create(
        name=name, defaults={"node_selector": selector if selector is not None else {"pool": name}}
    )
    return group


def make_quota(
    group: QuotaGroup,
    tenant: Tenant | None = None,
    *,
    name: str | None = None,
    gpu_min_milli: int = 0,
    gpu_max_milli: int = BIG,
    cpu_max_milli: int = BIG,
    **fields: Any,
) -> Quota:
    """A quota with generous max on both sides unless told otherwise (min defaults to 0)."""
    tenant = tenant or TenantFactory.create()
    bounds: dict[str, Any] = {}
    if hasattr(Quota, "gpu_max_gpu_milli"):
        bounds = {
            "gpu_min_gpu_milli": gpu_min_milli,
            "gpu_max_gpu_milli": gpu_max_milli,
            "gpu_max_gpu_memory_mib": BIG,
            "gpu_max_cpu_milli": BIG,
            "gpu_max_memory_mib": BIG,
            "cpu_max_cpu_milli": cpu_max_milli,
            "cpu_max_memory_mib": BIG,
        }
    bounds.update(fields)
    return Quota.objects.create(
        group=group, tenant=tenant, name=name or f"{tenant.slug}-{next(_seq)}", **bounds
    )


def gpu_node(
    name: str, model: str, memory_gib: int, gpus: int = 4, pool: str = "training"
) -> NodeInventory:
    """One node labelled pool=<pool> with `gpus` cards of `model` and `memory_gib` each."""
    return NodeInventory(
        name=name,
        cpu_milli=64000,
        memory_mib=512 * 1024,
        gpu_model=model,
        labels=(("pool", pool),),
        gpus=tuple(
            GpuInventory(index=j, uuid=f"GPU-{name}-{j}", model=model, memory_mib=memory_gib * 1024)
            for j in range(gpus)
        ),
    )


def load_demo() -> None:
    sync_inventory_rows(load_demo_inventory())


def small_cluster(
    pool: str = "training",
    *,
    gpu_nodes: int = 2,
    gpus_per_node: int = 4,
    cpu_nodes: int = 0,
    gpu_memory_mib: int = 40960,
    cpu_milli: int = 32000,
    memory_mib: int = 131072,
    model: str = "A100",
) -> None:
    """Nodes `<pool>-g<i>` with GPUs and `<pool>-c<i>` without, labelled pool=<pool>."""
    inv = [
        NodeInventory(
            name=f"{pool}-g{i}",
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            gpu_model=model,
            labels=(("pool", pool),),
            gpus=tuple(
                GpuInventory(
                    index=j,
                    uuid=f"GPU-{pool}-{i}-{j}",
                    model=model,
                    memory_mib=gpu_memory_mib,
                    numa_node=j // max(1, gpus_per_node // 2),
                    nvlink_group=j // 4,
                )
                for j in range(gpus_per_node)
            ),
        )
        for i in range(gpu_nodes)
    ] + [
        NodeInventory(
            name=f"{pool}-c{i}",
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            labels=(("pool", pool),),
        )
        for i in range(cpu_nodes)
    ]
    sync_inventory_rows(inv)


def submit_whole_gpu_jobs(quota: Quota, count: int, prefix: str) -> list[Any]:
    """`count` one-GPU job pods (1 CPU, 1 GiB, a whole card of 40 GiB) of `quota`, named prefix-0..."""
    return [
        services.submit_workload(
            tenant=quota.tenant,
            quota=quota,
            kind="job_pod",
            name=f"{prefix}-{i}",
            cpu_milli=1000,
            memory_mib=1024,
            gpu_count=1,
            gpu_milli=1000,
            gpu_memory_mib=40960,
        )
        for i in range(count)
    ]
