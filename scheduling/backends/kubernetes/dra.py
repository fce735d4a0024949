"""The ``dra`` mode as plain data: a placement's ResourceClaim, the pod's reference to it, the allocation
read back, and the GPU inventory from the ResourceSlices a DRA driver publishes (``resource.k8s.io/v1``).

- **Claims.** One ResourceClaim per placement, named after the pod (``<pod>-gpu``), with one request per GPU
  of the placement (``gpu-<index>``). Each request names the DeviceClass the operator mapped to the
  placement's unit (``gpu`` for a whole card, ``mig`` for a MIG instance; ``KubeConfig.dra_device_classes``)
  and pins the engine's choice by CEL: a whole card by its ``uuid``, a MIG instance by its parent card's
  ``parentUUID``, ``profile`` and its ``memorySlice<start>`` capacity (`mig.mig_selector`: the names NVIDIA's
  driver publishes, see `scheduling.backends.kubernetes.mig`). The class's quota count must be what the placement
  was charged, so quota and cluster never disagree about what a device is worth.
- **Inventory.** Per node, the cards the slices publish: plain GPU devices (``uuid``, ``productName``,
  ``index``, ``memory`` capacity) and MIG-partitionable cards (the parents of ``type`` ``mig`` devices). A
  card with a ``NoSchedule`` or ``NoExecute`` device taint is unhealthy, so the engine does not use it.
- **Allocation.** The scheduler writes ``status.allocation.devices.results``; each result's request name
  gives the GPU index, its ``driver/pool/device`` is recorded on the placement's GPU share.

Pure: no ``kubernetes`` import, no I/O; the backend sends and reads these objects through the gateway.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from core.placement.mig_profiles import MEMORY_SLICES, mig_geometry
from core.units import MIB_PER_GIB, MILLI_PER_GPU, is_mig_profile
from scheduling.backends.base import GpuBinding, GpuInventory, MaterializeRequest, NodeInventory
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.config import KubeConfig
from scheduling.backends.kubernetes.interface import ClusterApiError, JsonDict
from scheduling.backends.kubernetes.inventory import (
    node_is_ready,
    node_to_inventory,
    normalize_model,
)
from scheduling.backends.kubernetes.mig import (
    RESOURCE_API,
    DraMigDevice,
    device_class_quota_milli,
    mig_devices,
    mig_selector,
    static_layout_of,
)
from scheduling.backends.kubernetes.quantity import bytes_to_mib

_UUID = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.:]{0,127}$")
_REQUEST = re.compile(r"^gpu-(\d{1,3})$")
_BLOCKING_TAINTS = frozenset({"NoSchedule", "NoExecute"})
MAX_DEVICE_REFERENCE = (
    320  # driver (253) + pool + device names, as PlacementGpu.allocated_device holds
)


class DraClaimError(ClusterApiError):
    """The placement cannot be expressed as a claim in this cluster's configuration (never retried)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


def claim_name(pod_name: str) -> str:
    """The ResourceClaim of a placement's pod."""
    return f"{pod_name}{c.CLAIM_SUFFIX}"


def _unit(gpu: GpuBinding) -> str:
    return "mig" if gpu.mig_profile else "gpu"


def _selector(gpu: GpuBinding, driver: str) -> str:
    """The CEL expression that matches exactly the device the engine chose for ``gpu``."""
    if not _UUID.match(gpu.uuid):
        raise DraClaimError(f"GPU {gpu.index}: {gpu.uuid[:40]!r} is not a device UUID")
    attrs = f'device.attributes["{driver}"]'
    if not gpu.mig_profile:
        return f'{attrs}.uuid == "{gpu.uuid}"'
    if (
        not is_mig_profile(gpu.mig_profile)
        or gpu.mig_start is None
        or not 0 <= gpu.mig_start < MEMORY_SLICES
    ):
        raise DraClaimError(
            f"GPU {gpu.index}: not a MIG placement ({gpu.mig_profile} at {gpu.mig_start})"
        )
    return mig_selector(driver, gpu.uuid, gpu.mig_profile, gpu.mig_start)


def build_claim(
    request: MaterializeRequest, config: KubeConfig, labels: Mapping[str, str]
) -> JsonDict:
    """The ResourceClaim that makes the placement's GPUs real: one pinned request per GPU.

    Raises DraClaimError when the configuration maps no DeviceClass to a GPU's unit, when that class
    counts a different quota than the placement was charged, or for a fractional share (DRA hands out
    whole devices: a HAMi slice has no DRA device to pin)."""
    requests = []
    for gpu in sorted(request.gpus, key=lambda g: g.index):
        unit = _unit(gpu)
        if unit == "gpu" and gpu.gpu_milli != MILLI_PER_GPU:
            raise DraClaimError(
                f"{request.name}: GPU {gpu.index} is a {gpu.gpu_milli}m share; dra mode places whole "
                "cards and MIG instances only"
            )
        device_class = config.device_class(unit)
        if not device_class:
            raise DraClaimError(
                f"{request.name}: no DeviceClass is mapped to {unit!r} (TESSERA_KUBE_DRA_DEVICE_CLASSES)"
            )
        counted = device_class_quota_milli(
            device_class, dict(config.dra_device_classes), gpu.mig_profile
        )
        if counted != gpu.gpu_milli:
            raise DraClaimError(
                f"{request.name}: DeviceClass {device_class} counts {counted}m, the placement holds "
                f"{gpu.gpu_milli}m of GPU {gpu.index}"
            )
        requests.append(
            {
                "name": f"gpu-{gpu.index}",
                "exactly": {
                    "deviceClassName": device_class,
                    "allocationMode": "ExactCount",
                    "count": 1,
                    "selectors": [{"cel": {"expression": _selector(gpu, config.dra_driver)}}],
                },
            }
        )
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {
            "name": claim_name(request.name),
            "namespace": config.namespace,
            "labels": dict(labels),
        },
        "spec": {"devices": {"requests": requests}},
    }


def pod_claim_parts(request: MaterializeRequest, spec: JsonDict, container: JsonDict) -> None:
    """Make the pod consume its placement's claim (``spec.resourceClaims`` and the container's
    ``resources.claims``); the default scheduler allocates it on the node the affinity pins."""
    spec["resourceClaims"] = [
        {"name": c.POD_CLAIM_NAME, "resourceClaimName": claim_name(request.name)}
    ]
    container["resources"]["claims"] = [{"name": c.POD_CLAIM_NAME}]


def allocated_devices(claim: Mapping[str, Any]) -> tuple[tuple[int, str], ...]:
    """``(GPU index, "driver/pool/device")`` of each allocated request of a claim Tessera made, in index
    order; ``()`` while it is not allocated. Results of requests Tessera did not name are ignored."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    out: dict[int, str] = {}
    for result in results:
        match = _REQUEST.match(str(result.get("request") or ""))
        if not match:
            continue
        reference = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
        out[int(match.group(1))] = reference[:MAX_DEVICE_REFERENCE]
    return tuple(sorted(out.items()))


# ---------------------------------------------------------------- inventory from ResourceSlices
def _attribute(device: Mapping[str, Any], name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    for kind in ("string", "int", "bool", "version"):
        if kind in value:
            return value[kind]
    return None


#: NVIDIA's whole-card device name, gpu-<minor> (GpuInfo.CanonicalName in the driver's deviceinfo.go).
_GPU_DEVICE_NAME = re.compile(r"^gpu-(\d+)$")


def _tainted(device: Mapping[str, Any]) -> bool:
    return any(t.get("effect") in _BLOCKING_TAINTS for t in device.get("taints") or [])


def slice_gpus(slices: Iterable[Mapping[str, Any]], driver: str) -> dict[str, list[GpuInventory]]:
    """Node name -> its cards as ``driver``'s slices publish them, in index order. A card is a plain GPU
    device (attribute ``type`` absent or ``gpu``) or the parent of ``mig`` devices (one card per
    ``parentUUID``, its memory from the MIG geometry); the same UUID is one card even when the driver
    publishes both. A blocking taint on any of a card's devices makes the card unhealthy. A card whose
    MIG devices do not overlap is a static layout (the instances that exist, `mig.static_layout_of`);
    one publishing every possible placement is dynamic (empty ``mig_layout``)."""
    mine = [s for s in slices if (s.get("spec") or {}).get("driver") == driver]
    cards: dict[tuple[str, str], GpuInventory] = {}
    for resource_slice in mine:
        spec = resource_slice.get("spec") or {}
        node = str(spec.get("nodeName") or "")
        for device in spec.get("devices") or []:
            kind = _attribute(device, "type")
            uuid, index = _attribute(device, "uuid"), _attribute(device, "index")
            if not isinstance(
                index, int
            ):  # NVIDIA's driver names a card gpu-<minor>, no index attribute
                whole = _GPU_DEVICE_NAME.match(str(device.get("name") or ""))
                index = int(whole.group(1)) if whole else None
            if kind not in (None, "gpu") or not isinstance(uuid, str) or not isinstance(index, int):
                continue
            memory = ((device.get("capacity") or {}).get("memory") or {}).get("value") or "0"
            try:
                memory_mib = bytes_to_mib(memory)
            except ValueError:
                memory_mib = 0
            cards[(node, uuid)] = GpuInventory(
                index=index,
                uuid=uuid,
                model=normalize_model(str(_attribute(device, "productName") or "")),
                memory_mib=memory_mib,
                healthy=not _tainted(device),
            )
    tainted_parents = {
        (str((s.get("spec") or {}).get("nodeName") or ""), str(_attribute(d, "parentUUID")))
        for s in mine
        for d in (s.get("spec") or {}).get("devices") or []
        if _attribute(d, "type") == "mig" and _tainted(d)
    }
    parents: dict[tuple[str, str], list[DraMigDevice]] = {}
    for device in mig_devices(mine):
        if mig_geometry(device.product) is not None and device.card_index >= 0:
            parents.setdefault((device.node, device.parent_uuid), []).append(device)
    for key, devices in parents.items():
        first = devices[0]
        geometry = mig_geometry(first.product)
        assert geometry is not None
        known = cards.get(key)
        cards[key] = GpuInventory(
            index=first.card_index,
            uuid=first.parent_uuid,
            model=known.model if known else normalize_model(first.product),
            memory_mib=known.memory_mib
            if known and known.memory_mib
            else geometry.memory_gib * MIB_PER_GIB,
            healthy=(known.healthy if known else True) and key not in tainted_parents,
            mig_layout=static_layout_of(devices),
        )
    by_node: dict[str, list[GpuInventory]] = {}
    for (node, _uuid), gpu in sorted(cards.items(), key=lambda kv: (kv[0][0], kv[1].index)):
        by_node.setdefault(node, []).append(gpu)
    return by_node


def dra_inventory(
    nodes: Iterable[JsonDict], slices: Iterable[Mapping[str, Any]], driver: str
) -> list[NodeInventory]:
    """Every node, sorted by name, with its GPUs as ``driver``'s slices publish them (a node the driver
    publishes nothing for has no GPUs in dra mode). A card of a node that is not Ready is unhealthy."""
    gpus_by_node = slice_gpus(slices, driver)
    out = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        base = node_to_inventory(node, None, prefer_koordinator=False)
        ready = node_is_ready(node)
        gpus = tuple(
            replace(g, healthy=g.healthy and ready) for g in gpus_by_node.get(base.name, ())
        )
        out.append(replace(base, gpu_model=gpus[0].model if gpus else base.gpu_model, gpus=gpus))
    return out
