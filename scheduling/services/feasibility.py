"""Refuse at submit a job that can never fit its pool, with the numbers, instead of letting it wait.

"Never" is judged against the pool's whole inventory (every node the group's selector matches, cordoned
or unhealthy included, since those come back): a pod needing more GPUs, CPU or memory than the largest
matching node has, node labels no node carries, a GPU model the pool lacks, or a gang whose
`min_available` pods need more GPUs together than the pool has. What is merely busy still queues.
A pool with no nodes at all is not judged: its nodes may still be joining.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.units import MILLI_PER_GPU
from portal.errors import InvalidInput
from portal.numbers import counted
from quotas.models import QuotaGroup
from scheduling.models import Gpu, Node
from scheduling.services.pool_cache import pool_cached
from scheduling.services.snapshot import group_nodes, node_matches


class NeverFits(InvalidInput):
    """The request exceeds the pool's whole inventory; waiting would never place it."""

    code = "never_fits"


@dataclass(frozen=True)
class _PoolNode:
    node: Node
    gpu_models: tuple[str, ...]
    gpu_memory_mib: tuple[int, ...]


def _pool(group: QuotaGroup) -> list[_PoolNode]:
    """Every node counted toward the group with its cards (cached per worker while the inventory is
    unchanged: `scheduling.services.pool_cache`)."""
    return pool_cached(group, "feasibility", lambda: _read_pool(group))


def warm_pool(group: QuotaGroup) -> None:
    """Read the group's pool into the worker's cache now (an idle cycle does it: the next submission
    does not pay for reading every node of a large pool)."""
    _pool(group)


def _read_pool(group: QuotaGroup) -> list[_PoolNode]:
    nodes = group_nodes(group)
    models: dict[int, list[str]] = defaultdict(list)
    memory: dict[int, list[int]] = defaultdict(list)
    for node_id, model, memory_mib in Gpu.objects.filter(node__in=nodes).values_list(
        "node_id", "model", "memory_mib"
    ):
        models[node_id].append(model)
        memory[node_id].append(memory_mib)
    return [_PoolNode(n, tuple(models[n.pk]), tuple(memory[n.pk])) for n in nodes]


def _labels_text(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _gpus_per_pod(spec: Mapping[str, Any]) -> float:
    return int(spec["gpu_count"]) * int(spec["gpu_milli"] or MILLI_PER_GPU) / MILLI_PER_GPU


def _check_pod(
    group: QuotaGroup, pool: list[_PoolNode], spec: Mapping[str, Any], index: int
) -> int:
    """Raise NeverFits when the pod of `spec` fits no node of `pool`; return how many GPUs (of the
    models it accepts) the nodes it may use hold together."""

    def refuse(field: str, message: str) -> NeverFits:
        return NeverFits(f"Pod {index}: {message}", fields={f"members[{index}].{field}": [message]})

    labels = spec.get("node_labels") or {}
    candidates = [p for p in pool if node_matches(p.node.labels or {}, labels)]
    if not candidates:
        raise refuse(
            "node_labels", f"No node of pool {group.name} has the labels {_labels_text(labels)}."
        )
    wanted = set(spec.get("gpu_models") or ())
    gpu_count = int(spec["gpu_count"])
    usable = [
        [(m, mem) for m, mem in zip(p.gpu_models, p.gpu_memory_mib, strict=True)
         if not wanted or m in wanted]
        for p in candidates
    ]  # fmt: skip
    if gpu_count and wanted and not any(usable):
        present = sorted({m for p in candidates for m in p.gpu_models})
        raise refuse(
            "gpu_models",
            f"No node of pool {group.name} has a GPU of model {' or '.join(sorted(wanted))} "
            f"(it has: {', '.join(present) or 'no GPUs'}).",
        )
    largest_gpus = max(len(gpus) for gpus in usable)
    if gpu_count > largest_gpus:
        raise refuse(
            "gpu_count",
            f"Each pod needs {counted(gpu_count, 'GPU')} on one node; the largest node of pool {group.name} "
            f"has {largest_gpus}.",
        )
    slice_memory = int(spec.get("gpu_memory_mib") or 0)
    largest_card = max((mem for gpus in usable for _m, mem in gpus), default=0)
    if gpu_count and slice_memory > largest_card:
        raise refuse(
            "gpu_memory_mib",
            f"Each pod needs {slice_memory} MiB of GPU memory; the largest GPU of pool "
            f"{group.name} has {largest_card}.",
        )
    for field, unit in (("cpu_milli", "milli-CPU"), ("memory_mib", "MiB of memory")):
        largest = max(int(getattr(p.node, field)) for p in candidates)
        if int(spec[field]) > largest:
            raise refuse(
                field,
                f"Each pod needs {spec[field]} {unit} on one node; the largest node of pool "
                f"{group.name} has {largest}.",
            )
    return sum(len(gpus) for gpus in usable)


def check_gang_fits(
    group: QuotaGroup, specs: Sequence[Mapping[str, Any]], *, min_available: int
) -> None:
    """Raise NeverFits (400 `never_fits`, naming the field and the numbers) when the gang of `specs`
    (validated resource dicts) can never be placed in `group`'s pool, however long it waits."""
    pool = _pool(group)
    if not pool:
        return
    capacity = 0
    checked: dict[tuple[Any, ...], int] = {}
    for index, spec in enumerate(specs):
        key = tuple(sorted((k, repr(v)) for k, v in spec.items()))
        if key not in checked:  # a job's pods are usually identical: check each shape once
            checked[key] = _check_pod(group, pool, spec, index)
        capacity = max(capacity, checked[key])
    per_pod = sorted(_gpus_per_pod(spec) for spec in specs)
    needed = sum(per_pod[:min_available])
    if needed > capacity:
        field = "pods" if min_available == len(specs) else "min_available"
        shape = (
            f"{min_available} pods × {per_pod[0]:g} GPUs = {needed:g} GPUs"
            if per_pod[0] == per_pod[min_available - 1]
            else f"{min_available} pods, {needed:g} GPUs"
        )
        message = f"The job needs {shape} placed together; pool {group.name} has {capacity}."
        raise NeverFits(message, fields={field: [message]})
