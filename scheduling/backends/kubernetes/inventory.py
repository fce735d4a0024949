"""Nodes (and Koordinator Device objects) → NodeInventory.

GPUs come from the first source that has them: Koordinator's `Device` (in koordinator mode) or
HAMi's `hami.io/node-nvidia-register` annotation (JSON or the older colon format), then the other
one, and finally the GPU Feature Discovery labels (count and memory only; such GPUs get a
synthetic id `gfd:<node>:<index>` because GFD publishes no UUIDs). Never read the GPU count from
`allocatable[nvidia.com/gpu]` under HAMi: it is GPUs × splitCount (spec section 6.3).

A GPU is healthy when its source says so, its node is Ready, and it is not listed in the node's
`hami.io/device-cordon` annotation. A node whose GFD labels say `nvidia.com/mig.strategy=mixed` has static
MIG cards: its `nvidia.com/mig-<profile>` counts become each card's layout (`mig.static_layouts`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from scheduling.backends.base import GpuInventory, NodeInventory
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.hami import parse_node_register
from scheduling.backends.kubernetes.interface import JsonDict
from scheduling.backends.kubernetes.mig import static_layouts, static_mig_counts
from scheduling.backends.kubernetes.quantity import bytes_to_mib, cpu_milli

logger = logging.getLogger(__name__)

KOORD_GPU_MODEL_LABEL = "node.koordinator.sh/gpu-model"


def normalize_model(model: str) -> str:
    """One spelling for GFD, HAMi and Koordinator: `NVIDIA-NVIDIA A100-SXM4-80GB` (HAMi prefixes
    `NVIDIA-`) and `NVIDIA A100-SXM4-80GB` both become GFD's `NVIDIA-A100-SXM4-80GB`."""
    text = model.strip()
    if text.startswith("NVIDIA-NVIDIA"):
        text = text[len("NVIDIA-") :]
    return text.replace(" ", "-")


def nodes_to_inventory(
    nodes: Iterable[JsonDict], devices: Iterable[JsonDict], *, prefer_koordinator: bool
) -> list[NodeInventory]:
    """Convert every node, sorted by name; `devices` are Koordinator Device objects (any order)."""
    by_node = {d.get("metadata", {}).get("name", ""): d for d in devices}
    return [
        node_to_inventory(node, by_node.get(node["metadata"]["name"]), prefer_koordinator)
        for node in sorted(nodes, key=lambda n: n["metadata"]["name"])
    ]


def node_to_inventory(
    node: JsonDict, device: JsonDict | None, prefer_koordinator: bool
) -> NodeInventory:
    """One node as NodeInventory."""
    meta = node.get("metadata", {})
    name = str(meta["name"])
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    allocatable = node.get("status", {}).get("allocatable") or {}
    sources = (
        [_koordinator_gpus, _hami_gpus] if prefer_koordinator else [_hami_gpus, _koordinator_gpus]
    )
    gpus: list[GpuInventory] = []
    for source in [*sources, _gfd_gpus]:
        gpus = source(name, labels, annotations, device)
        if gpus:
            break
    cordoned_uuids = {u.strip() for u in annotations.get(c.HAMI_DEVICE_CORDON, "").split(",")}
    ready = node_is_ready(node)
    gpus = [_with_health(g, ready and g.uuid not in cordoned_uuids) for g in gpus]
    counts = static_mig_counts(labels, allocatable)
    if counts:  # static MIG, device plugin mixed strategy: the operator's layout, positions derived
        gpus.sort(key=lambda g: g.index)
        layouts = static_layouts(counts, [(g.model, g.memory_mib) for g in gpus])
        gpus = [replace(g, mig_layout=layout) for g, layout in zip(gpus, layouts, strict=True)]
    model = normalize_model(
        labels.get(c.GFD_PRODUCT, "")
        or (device or {}).get("metadata", {}).get("labels", {}).get(KOORD_GPU_MODEL_LABEL, "")
        or labels.get(KOORD_GPU_MODEL_LABEL, "")
        or (gpus[0].model if gpus else "")
    )
    return NodeInventory(
        name=name,
        cpu_milli=cpu_milli(allocatable.get("cpu", "0")),
        memory_mib=bytes_to_mib(allocatable.get("memory", "0")),
        gpu_model=model,
        labels=tuple(sorted(labels.items())),
        taints=tuple(_taint(t) for t in node.get("spec", {}).get("taints") or []),
        cordoned=bool(node.get("spec", {}).get("unschedulable", False)),
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
    )


def _hami_gpus(
    name: str, labels: Mapping[str, str], annotations: Mapping[str, str], device: Any
) -> list[GpuInventory]:
    raw = annotations.get(c.HAMI_NODE_REGISTER, "")
    if not raw:
        return []
    try:
        devices = parse_node_register(raw)
    except (ValueError, TypeError) as exc:
        logger.warning("node %s: unreadable %s annotation: %s", name, c.HAMI_NODE_REGISTER, exc)
        return []
    return [
        GpuInventory(
            index=d.index,
            uuid=d.uuid,
            model=normalize_model(d.model),
            memory_mib=d.memory_mib,
            numa_node=d.numa,
            healthy=d.healthy,
        )
        for d in devices
    ]


def _koordinator_gpus(
    name: str, labels: Mapping[str, str], annotations: Mapping[str, str], device: JsonDict | None
) -> list[GpuInventory]:
    if not device:
        return []
    model = normalize_model(
        device.get("metadata", {}).get("labels", {}).get(KOORD_GPU_MODEL_LABEL, "")
    )
    gpus = []
    for entry in device.get("spec", {}).get("devices") or []:
        if entry.get("type") != "gpu":
            continue
        resources = entry.get("resources") or {}
        conditions = entry.get("conditions") or []
        condition_ok = all(
            cond.get("status") == "True" for cond in conditions if cond.get("type") == "Healthy"
        )
        gpus.append(
            GpuInventory(
                index=int(entry.get("minor", 0)),
                uuid=str(entry.get("id", "")),
                model=model,
                memory_mib=bytes_to_mib(resources.get(c.KOORD_GPU_MEMORY, "0")),
                numa_node=int((entry.get("topology") or {}).get("nodeID", 0)),
                healthy=bool(entry.get("health", False)) and condition_ok,
            )
        )
    return gpus


def _gfd_gpus(
    name: str, labels: Mapping[str, str], annotations: Mapping[str, str], device: Any
) -> list[GpuInventory]:
    try:
        count = int(labels.get(c.GFD_COUNT, "0"))
        memory = int(labels.get(c.GFD_MEMORY, "0"))
    except ValueError:
        logger.warning("node %s: non-numeric GPU Feature Discovery labels", name)
        return []
    model = normalize_model(labels.get(c.GFD_PRODUCT, ""))
    return [
        GpuInventory(index=i, uuid=f"gfd:{name}:{i}", model=model, memory_mib=memory)
        for i in range(count)
    ]


def _with_health(gpu: GpuInventory, healthy: bool) -> GpuInventory:
    return replace(gpu, healthy=gpu.healthy and healthy)


def node_is_ready(node: JsonDict) -> bool:
    for cond in node.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _taint(taint: Mapping[str, str]) -> str:
    """`key=value:Effect`, or `key:Effect` without a value (kubectl's spelling)."""
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key', '')}{value}:{taint.get('effect', '')}"
