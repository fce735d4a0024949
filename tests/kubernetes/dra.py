"""resource.k8s.io/v1 objects (Dynamic Resource Allocation, GA in Kubernetes 1.34) as a GPU DRA
driver publishes them and as the scheduler allocates them.

Tessera has no DRA mode yet. These builders are what its tests will publish (ResourceSlices per
node) and read back (a claim's allocation): the DRA mode's backend tests take them as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
                    "attributes": {
                        "uuid": {"string": uuid},
                        "productName": {"string": product},
                        "index": {"int": index},
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
