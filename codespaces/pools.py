"""Read-only facts about a quota group's GPU pool that the create form and its validation need.

Nodes belong to a group as the quota tree counts them (`quotas.usage.matching_nodes`: labels contain every
item of the group's `node_selector`, a node two groups match belongs to the oldest). Only healthy GPUs of healthy nodes count.
"""

from __future__ import annotations

from dataclasses import dataclass

from quotas.models import QuotaGroup
from quotas.usage import matching_node_ids
from scheduling.models import Gpu, Node


@dataclass(frozen=True)
class PoolGpuModel:
    model: str
    memory_mib: int  # the largest card of this model in the pool
    count: int


def nodes_of_group(group: QuotaGroup) -> list[Node]:
    """The group's nodes (labels ⊇ node_selector, less those an older group claims), by name."""
    return list(Node.objects.filter(pk__in=matching_node_ids(group)).order_by("name"))


def gpu_models_of_group(group: QuotaGroup) -> list[PoolGpuModel]:
    """GPU models in the pool with their largest memory and how many healthy cards there are."""
    node_ids = [node.pk for node in nodes_of_group(group) if node.healthy]
    found: dict[str, PoolGpuModel] = {}
    for model, memory_mib in Gpu.objects.filter(node_id__in=node_ids, healthy=True).values_list(
        "model", "memory_mib"
    ):
        seen = found.get(model)
        found[model] = PoolGpuModel(
            model=model,
            memory_mib=max(memory_mib, seen.memory_mib if seen else 0),
            count=(seen.count if seen else 0) + 1,
        )
    return sorted(found.values(), key=lambda item: (-item.memory_mib, item.model))


def largest_gpu_memory_mib(group: QuotaGroup, gpu_model: str = "") -> int:
    """The memory of the largest healthy GPU in the pool (of `gpu_model` when given); 0 when none."""
    sizes = [
        m.memory_mib for m in gpu_models_of_group(group) if not gpu_model or m.model == gpu_model
    ]
    return max(sizes, default=0)
