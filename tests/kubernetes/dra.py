"""resource.k8s.io/v1 objects (Dynamic Resource Allocation, GA in Kubernetes 1.34) as a GPU DRA
driver publishes them and as the scheduler allocates them.

These builders are what the DRA tests publish (ResourceSlices per node, plain GPUs or MIG-partitionable
cards) and read back (a claim's allocation); scheduling.backends.kubernetes.mig reads and writes the same
shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.placement.mig_profiles import MEMORY_SLICES, mig_geometry

DRIVER = "gpu.tessera.test"
API = "/apis/resource.k8s.io/v1"


def device_class(name: str = DRIVER, driver: str = DRIVER) -> dict[str, Any]:
    """The class a cluster admin creates for a driver's devices."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def resource_slice(
    node: str, gpus: Sequence[tuple[str, str, int]], *, driver: str = DRIVER, generation: int = 1
) -> dict[str, Any]:
    """What the driver's kubelet plugin publishes for a node: one device per (uuid, product,
    memory MiB), with the attributes and capacity a claim's CEL selector can test."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{index}",
                    "attributes": {  # as NVIDIA's driver: no index attribute, the name says it
                        "uuid": {"string": uuid},
                        "productName": {"string": product},
                    },
                    "capacity": {"memory": {"value": f"{memory_mib}Mi"}},
                }
                for index, (uuid, product, memory_mib) in enumerate(gpus)
            ],
        },
    }


def gpu_request(
    device_class_name: str = DRIVER, *, min_memory_mib: int = 0, count: int = 1
) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": device_class_name,
        "allocationMode": "ExactCount",
        "count": count,
    }
    if min_memory_mib:
        expression = (
            f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{min_memory_mib}Mi")) >= 0'
        )
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    return {"name": "gpu", "exactly": exactly}


def resource_claim(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }


def resource_claim_template(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def allocation(node: str, device: str, *, driver: str = DRIVER) -> dict[str, Any]:
    """The claim status the scheduler writes when it allocates `device` of `node`'s pool."""
    return {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": driver, "pool": node, "device": device}
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            }
        }
    }


def mig_resource_slice(
    node: str,
    cards: Sequence[tuple[str, str]],
    *,
    driver: str = DRIVER,
    tainted: Sequence[int] = (),
    generation: int = 1,
) -> dict[str, Any]:
    """A partitionable slice as NVIDIA's DRA driver publishes it (kubernetes-sigs/dra-driver-nvidia-gpu,
    ``cmd/gpu-kubelet-plugin/mig.go`` / ``deviceinfo.go``): per (uuid, product) card a counter set
    ``gpu-<i>-counters`` of 8 memory slices, and per valid MIG placement a device of ``type`` ``mig`` with
    the attributes ``profile``, ``parentUUID``, ``productName`` (no start or index attribute: the driver
    has none), one ``memorySlice<j>`` capacity per memory slice it spans, consuming those slices'
    counters. Its name ``gpu-<i>-mig-<profile>-<start>`` is shorter than the driver's
    ``gpu-<i>-mig-<profile>-<GI profile id>-<start>``, so readers here find the start from the capacity. Cards whose
    index is in ``tainted`` carry a NoSchedule device taint."""
    counters = []
    devices = []
    for index, (uuid, product) in enumerate(cards):
        geometry = mig_geometry(product)
        assert geometry is not None, product
        counter_set = f"gpu-{index}-counters"
        counters.append(
            {
                "name": counter_set,
                "counters": {f"memory-slice-{i}": {"value": "1"} for i in range(MEMORY_SLICES)},
            }
        )
        for profile in geometry.profiles:
            for start in profile.starts:
                spanned = range(start, start + profile.memory_slices)
                device: dict[str, Any] = {
                    "name": f"gpu-{index}-mig-{profile.name.replace('.', '-')}-{start}",
                    "attributes": {
                        "type": {"string": "mig"},
                        "profile": {"string": profile.name},
                        "parentUUID": {"string": uuid},
                        "productName": {"string": product},
                    },
                    "capacity": {
                        "memory": {"value": f"{profile.memory_gib}Gi"},
                        **{f"memorySlice{i}": {"value": "1"} for i in spanned},
                    },
                    "consumesCounters": [
                        {
                            "counterSet": counter_set,
                            "counters": {
                                f"memory-slice-{i}": {"value": "1"}
                                for i in range(start, start + profile.memory_slices)
                            },
                        }
                    ],
                }
                if index in tainted:
                    device["taints"] = [
                        {"key": f"{driver}/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
                    ]
                devices.append(device)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-mig"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "sharedCounters": counters,
            "devices": devices,
        },
    }
