"""MIG on Kubernetes, as plain data: static MIG through the NVIDIA device plugin, dynamic MIG through DRA.

Static MIG (device plugin, ``mixed`` strategy): each profile is its own extended resource,
``nvidia.com/mig-1g.10gb``; GPU Feature Discovery labels the node ``nvidia.com/mig.strategy=mixed`` and
``nvidia.com/mig-<profile>.count=<n>``. A pod asks for one instance with a limit of 1 on that resource.

DRA (``resource.k8s.io/v1``, Kubernetes 1.34+): the driver publishes one ResourceSlice per node; each card is a
counter set (``sharedCounters``, one counter per memory slice) and each MIG placement it can create is a device
that consumes the counters of the slices it spans. Checked against the source of NVIDIA's driver
(kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/mig.go`` ``CommonAttributesMig`` and
``deviceinfo.go`` ``GetDevice``): a MIG device has the attributes ``type`` (``mig``), ``parentUUID``, ``profile``,
``productName`` (and ``uuid`` once it exists), **no** start or parent-index attribute: its position is in its name,
``gpu-<parent minor>-mig-<profile>-<profile id>-<start>`` (``MigSpecTuple.ToCanonicalName``), and in its capacity,
one ``memorySlice<i>`` per memory slice it spans; a whole card is ``gpu-<minor>`` with ``type``, ``uuid`` and
``productName``. The reader takes the start and index from those (an attribute ``placementStart`` /
``parentIndex`` / ``index`` wins where a driver publishes one), and the claim pins the start by capacity. Tessera reads cards and their free and
allocated instances from the slices (:func:`mig_cards_from_slices`), pins the engine's choice in a ResourceClaim
whose CEL selector names the parent card, profile and start (:func:`mig_resource_claim`), and reads the
allocation back (:func:`claim_allocation`). A device with a ``NoSchedule`` or ``NoExecute`` taint is not offered.

Pure: no ``kubernetes`` import, no I/O; the gateway sends and reads these objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.placement.mig import MigCard, MigInstance, MigLayoutMode, MigPlacement
from core.placement.mig_profiles import MEMORY_SLICES, mig_geometry
from core.units import (
    MIB_PER_GIB,
    MILLI_PER_GPU,
    is_mig_profile,
    mig_gpu_equivalent_milli,
    parse_mig_profile,
)

JsonDict = dict[str, Any]

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GFD_MIG_STRATEGY = "nvidia.com/mig.strategy"
GFD_PRODUCT = "nvidia.com/gpu.product"
RESOURCE_API = "resource.k8s.io/v1"

_BLOCKING_TAINTS = frozenset({"NoSchedule", "NoExecute"})


# ---------------------------------------------------------------- static MIG (device plugin)
def mig_resource_name(profile: str) -> str:
    """The device plugin's extended resource of a profile: ``1g.10gb`` -> ``nvidia.com/mig-1g.10gb``."""
    parse_mig_profile(profile)
    return MIG_RESOURCE_PREFIX + profile


def static_mig_limits(profile: str) -> dict[str, str]:
    """The container limits that ask the device plugin for one instance of ``profile``."""
    return {mig_resource_name(profile): "1"}


def static_mig_node_selector(product: str) -> dict[str, str]:
    """The GFD labels a static-MIG pod's node must carry: mixed strategy, the card's product name."""
    return {GFD_MIG_STRATEGY: "mixed", GFD_PRODUCT: product}


def static_mig_counts(labels: Mapping[str, str], allocatable: Mapping[str, str]) -> dict[str, int]:
    """Instances per profile a static-MIG node offers: its ``nvidia.com/mig-*`` allocatable, else the GFD
    ``nvidia.com/mig-<profile>.count`` labels; ``{}`` unless GFD reports the mixed strategy."""
    if labels.get(GFD_MIG_STRATEGY) != "mixed":
        return {}
    counts: dict[str, int] = {}
    for key, value in allocatable.items():
        profile = key.removeprefix(MIG_RESOURCE_PREFIX)
        if key.startswith(MIG_RESOURCE_PREFIX) and is_mig_profile(profile) and value.isdigit():
            counts[profile] = int(value)
    if counts:
        return counts
    for key, value in labels.items():
        if key.startswith(MIG_RESOURCE_PREFIX) and key.endswith(".count") and value.isdigit():
            profile = key.removeprefix(MIG_RESOURCE_PREFIX).removesuffix(".count")
            if is_mig_profile(profile):
                counts[profile] = int(value)
    return counts


def static_layouts(
    counts: Mapping[str, int], cards: Sequence[tuple[str, int]]
) -> list[tuple[tuple[str, int], ...]]:
    """Per card (``(model, memory MiB)``, in index order) the static layout a node's per-profile instance
    counts describe. The device plugin reports counts per node, not positions, so each instance is put,
    largest profile first, on the first card with room at its lowest valid free start (how NVIDIA's MIG
    manager lays out its balanced configurations). Cards without a MIG geometry get ``()``; instances that
    fit nowhere (counts the cards cannot hold) are left out."""
    geometries = [
        mig_geometry(model) or mig_geometry(f"{model}-{round(mib / MIB_PER_GIB)}GB")
        for model, mib in cards
    ]
    used = [0] * len(cards)
    layouts: list[list[tuple[str, int]]] = [[] for _ in cards]
    wanted = []
    for profile, count in counts.items():
        size = next((g.profile(profile) for g in geometries if g and g.profile(profile)), None)
        if size is not None:
            wanted.append(
                (-size.compute_slices, -size.memory_slices, profile, min(count, 8 * len(cards)))
            )
    for _c, _m, profile, count in sorted(wanted):
        for _ in range(count):
            for index, geometry in enumerate(geometries):
                shape = geometry.profile(profile) if geometry else None
                start = (
                    next((s for s in shape.starts if not used[index] & shape.mask(s)), None)
                    if shape
                    else None
                )
                if shape is not None and start is not None:
                    used[index] |= shape.mask(start)
                    layouts[index].append((profile, start))
                    break
    return [tuple(sorted(layout, key=lambda i: i[1])) for layout in layouts]


def static_layout_of(devices: Sequence[DraMigDevice]) -> tuple[tuple[str, int], ...]:
    """The static layout a card's published MIG devices describe, ``()`` when they describe a dynamic card.

    A driver with dynamic MIG publishes every placement the card could take (they overlap: ``7g`` at 0 spans
    every slice); one with a static layout publishes the instances that exist, which never overlap."""
    geometry = mig_geometry(devices[0].product) if devices else None
    if geometry is None:
        return ()
    taken = 0
    layout = []
    for device in sorted(devices, key=lambda d: (d.start, d.profile)):
        shape = geometry.profile(device.profile)
        if shape is None or device.start not in shape.starts or taken & shape.mask(device.start):
            return ()
        taken |= shape.mask(device.start)
        layout.append((device.profile, device.start))
    return tuple(layout)


# ---------------------------------------------------------------- DRA: inventory from ResourceSlices
@dataclass(frozen=True, slots=True)
class DraMigDevice:
    """One MIG device a slice offers: which card (its UUID and index, -1 if unknown), profile, start, name."""

    node: str
    pool: str
    device: str
    card: str
    card_index: int
    parent_uuid: str
    product: str
    profile: str
    start: int
    tainted: bool


def _attribute(device: Mapping[str, Any], name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    for kind in ("string", "int", "bool", "version"):
        if kind in value:
            return value[kind]
    return None


def mig_devices(slices: Iterable[Mapping[str, Any]]) -> list[DraMigDevice]:
    """The MIG devices of the slices (devices of ``type`` ``mig`` with a profile and a start).

    The card is the device's ``parentUUID``; its index on the node is the ``parentIndex`` attribute, else the
    ``gpu-<minor>`` of NVIDIA's device name, else the ``gpu-<i>-counters`` counter set it consumes; the start is
    the ``placementStart`` attribute, else the name's last number, else its lowest ``memorySlice<i>``. A 1.34 API server without the ``DRAPartitionableDevices``
    feature gate drops the counters from stored slices, so the reader never depends on them."""
    out: list[DraMigDevice] = []
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        node = str(spec.get("nodeName") or "")
        pool = str((spec.get("pool") or {}).get("name") or node)
        for device in spec.get("devices") or []:
            if _attribute(device, "type") != "mig":
                continue
            named = _MIG_DEVICE_NAME.match(str(device.get("name") or ""))
            start = _attribute(device, "placementStart")
            if not isinstance(start, int):
                start = int(named.group(4)) if named else _first_memory_slice(device)
            profile = _attribute(device, "profile")
            parent = _attribute(device, "parentUUID")
            if (
                not isinstance(start, int)
                or not isinstance(profile, str)
                or not isinstance(parent, str)
            ):
                continue
            index = _attribute(device, "parentIndex")
            if not isinstance(index, int) and named:
                index = int(named.group(1))
            if not isinstance(index, int):
                consumes = device.get("consumesCounters") or [{}]
                match = re.match(r"^gpu-(\d+)", str(consumes[0].get("counterSet") or ""))
                index = int(match.group(1)) if match else -1
            taints = device.get("taints") or []
            out.append(
                DraMigDevice(
                    node=node,
                    pool=pool,
                    device=str(device.get("name")),
                    card=parent,
                    card_index=index,
                    parent_uuid=parent,
                    product=str(_attribute(device, "productName") or ""),
                    profile=profile,
                    start=start,
                    tainted=any(t.get("effect") in _BLOCKING_TAINTS for t in taints),
                )
            )
    return out


#: NVIDIA's canonical MIG device name: gpu-<parent minor>-mig-<profile>-<GI profile id>-<placement start>.
_MIG_DEVICE_NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")
_MEMORY_SLICE = re.compile(r"^memorySlice(\d)$")


def _first_memory_slice(device: Mapping[str, Any]) -> int | None:
    """The lowest ``memorySlice<i>`` capacity of a device (where its instance starts), None without."""
    slices = [
        int(m.group(1))
        for key in (device.get("capacity") or {})
        if (m := _MEMORY_SLICE.match(str(key)))
    ]
    return min(slices) if slices else None


def mig_selector(driver: str, parent_uuid: str, profile: str, start: int) -> str:
    """The CEL expression that admits exactly one MIG placement of ``driver``: its parent card, profile and
    start. The start is pinned by the ``memorySlice<start>`` capacity the driver gives the device: two
    placements of one profile never share a memory slice, so the one spanning ``start`` is the one starting
    there (the engine only chooses valid starts)."""
    attrs = f'device.attributes["{driver}"]'
    return (
        f'{attrs}.type == "mig" && {attrs}.parentUUID == "{parent_uuid}" && '
        f'{attrs}.profile == "{profile}" && "memorySlice{start}" in device.capacity["{driver}"]'
    )


def mig_cards_from_slices(
    slices: Sequence[Mapping[str, Any]], allocated: Iterable[tuple[str, str]] = ()
) -> list[MigCard]:
    """The engine's cards from published slices: each card (parent UUID) of a MIG-capable product is one
    dynamic card (DRA creates the instance when a claim is allocated); ``allocated`` lists ``(pool, device)`` of
    claims already allocated, which become instances in use. A card with a tainted device is unhealthy."""
    return [card for card, _uuid in _cards(slices, set(allocated))]


def parent_uuid(slices: Sequence[Mapping[str, Any]], node: str, gpu_index: int) -> str | None:
    """The UUID of card ``gpu_index`` of ``node`` as the slices publish it (what a claim pins), or ``None``."""
    for card, uuid in _cards(slices, set()):
        if (card.node, card.gpu_index) == (node, gpu_index):
            return uuid
    return None


def _cards(
    slices: Sequence[Mapping[str, Any]], taken: set[tuple[str, str]]
) -> list[tuple[MigCard, str]]:
    by_card: dict[tuple[str, str], list[DraMigDevice]] = {}
    for device in mig_devices(slices):
        by_card.setdefault((device.node, device.card), []).append(device)
    out: list[tuple[MigCard, str]] = []
    for position, ((node, uuid), devices) in enumerate(sorted(by_card.items())):
        product = devices[0].product
        if mig_geometry(product) is None:
            continue
        in_use = tuple(
            MigInstance(d.profile, d.start, in_use=True)
            for d in sorted(devices, key=lambda d: (d.start, d.profile))
            if (d.pool, d.device) in taken
        )
        index = devices[0].card_index if devices[0].card_index >= 0 else position
        card = MigCard(
            node,
            index,
            product,
            MigLayoutMode.DYNAMIC,
            in_use,
            healthy=not any(d.tainted for d in devices),
        )
        out.append((card, uuid))
    return out


# ---------------------------------------------------------------- DRA: placements as claims
def mig_resource_claim(
    name: str,
    placement: MigPlacement,
    *,
    parent_uuid: str,
    driver: str,
    device_class: str,
    namespace: str = "",
) -> JsonDict:
    """A ResourceClaim for the engine's choice: one device of ``device_class`` whose CEL selector pins the
    card (``parentUUID``), the profile and the start position, so the scheduler can only allocate that one."""
    if not is_mig_profile(placement.profile) or not 0 <= placement.start < MEMORY_SLICES:
        raise ValueError(f"not a MIG placement: {placement.profile} at {placement.start}")
    expression = mig_selector(driver, parent_uuid, placement.profile, placement.start)
    metadata: JsonDict = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": device_class,
                            "allocationMode": "ExactCount",
                            "count": 1,
                            "selectors": [{"cel": {"expression": expression}}],
                        },
                    }
                ]
            }
        },
    }


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """What the scheduler allocated for a claim, and the device's reported conditions (``type -> status``)."""

    driver: str
    pool: str
    device: str
    conditions: tuple[tuple[str, str], ...]


def claim_allocation(claim: Mapping[str, Any]) -> ClaimAllocation | None:
    """The claim's allocation result (its one device), or ``None`` while it is not allocated."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    if not results:
        return None
    first = results[0]
    conditions: list[tuple[str, str]] = []
    for device_status in status.get("devices") or []:
        if device_status.get("device") == first.get("device"):
            conditions.extend(
                (str(c.get("type")), str(c.get("status")))
                for c in device_status.get("conditions") or []
            )
    return ClaimAllocation(
        str(first.get("driver")),
        str(first.get("pool")),
        str(first.get("device")),
        tuple(conditions),
    )


def device_class_quota_milli(
    device_class: str, classes: Mapping[str, str], profile: str = ""
) -> int | None:
    """GPU milli one device of ``device_class`` counts as in quotas, from the operator's mapping of DeviceClass
    names to quota units (``"gpu"`` = a whole card, ``"mig"`` = the profile's GPU-equivalent, compute slices / 7 rounded down);
    ``None`` for a class the mapping does not name (Tessera does not count it)."""
    unit = classes.get(device_class)
    if unit == "gpu":
        return MILLI_PER_GPU
    if unit == "mig" and is_mig_profile(profile):
        return mig_gpu_equivalent_milli(profile)
    return None
