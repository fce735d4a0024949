"""resource.k8s.io/v1 is served by the test control plane and takes DRA objects the way a GPU
driver publishes them and the scheduler allocates them (the groundwork of a future DRA mode)."""

from __future__ import annotations

import uuid

import pytest

from core.placement.mig import MigRequest, plan_mig
from scheduling.backends.kubernetes.mig import (
    claim_allocation,
    mig_cards_from_slices,
    mig_resource_claim,
    parent_uuid,
)
from tests.kubernetes import dra
from tests.kubernetes.cluster import bind, create_node, kwok_node, pod_phase, wait_for
from tests.kubernetes.stack import KubeStack

pytestmark = pytest.mark.kubernetes


def test_dra_kinds_are_served_by_resource_k8s_io_v1(kube_stack: KubeStack) -> None:
    status, body = kube_stack.request("GET", dra.API)
    assert status == 200, body
    served = {r["kind"] for r in body["resources"] if "/" not in r["name"]}
    assert {"DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"} <= served


def test_published_slices_and_a_claim_allocation_round_trip(
    kube_stack: KubeStack, namespace: str
) -> None:
    node = f"dra-{uuid.uuid4().hex[:8]}"
    create_node(kube_stack, kwok_node(node))
    # given the driver's device class and the slice it publishes for the node
    status, _ = kube_stack.request("POST", f"{dra.API}/deviceclasses", dra.device_class())
    assert status in (201, 409)
    gpus = [
        ("GPU-dra-0", "NVIDIA-H100-80GB-HBM3", 81920),
        ("GPU-dra-1", "NVIDIA-H100-80GB-HBM3", 81920),
    ]
    status, published = kube_stack.request(
        "POST", f"{dra.API}/resourceslices", dra.resource_slice(node, gpus)
    )
    assert status == 201, published
    assert [d["attributes"]["uuid"]["string"] for d in published["spec"]["devices"]] == [
        "GPU-dra-0",
        "GPU-dra-1",
    ]
    # the node's slices are found by field selector, as a scheduler's informer filters them
    status, listed = kube_stack.request(
        "GET", f"{dra.API}/resourceslices?fieldSelector=spec.nodeName={node}"
    )
    assert [s["metadata"]["name"] for s in listed["items"]] == [f"{node}-{dra.DRIVER}"]
    # when a claim asks for one GPU with at least 40 GiB, and a template for the same
    claims = f"{dra.API}/namespaces/{namespace}/resourceclaims"
    request = dra.gpu_request(min_memory_mib=40960)
    status, claim = kube_stack.request("POST", claims, dra.resource_claim("cs-gpu", request))
    assert status == 201, claim
    status, template = kube_stack.request(
        "POST",
        f"{dra.API}/namespaces/{namespace}/resourceclaimtemplates",
        dra.resource_claim_template("cs-gpu-template", request),
    )
    assert status == 201, template
    # and a pod consumes the claim
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cs-dra"},
        "spec": {
            "automountServiceAccountToken": False,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "cs-gpu"}],
            "containers": [
                {
                    "name": "workspace",
                    "image": "busybox",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    status, body = kube_stack.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert status == 201, body
    # then the scheduler's allocation is accepted on the status and read back as written
    status, allocated = kube_stack.request(
        "PATCH",
        f"{claims}/cs-gpu/status",
        dra.allocation(node, "gpu-1"),
        content_type="application/merge-patch+json",
    )
    assert status == 200, allocated
    status, read = kube_stack.request("GET", f"{claims}/cs-gpu")
    results = read["status"]["allocation"]["devices"]["results"]
    assert [(r["driver"], r["pool"], r["device"]) for r in results] == [(dra.DRIVER, node, "gpu-1")]
    bind(kube_stack, namespace, "cs-dra", node)
    assert wait_for(
        "pod on the DRA node runs", lambda: pod_phase(kube_stack, namespace, "cs-dra") == "Running"
    )


def test_the_api_server_refuses_a_claim_without_a_device_class(
    kube_stack: KubeStack, namespace: str
) -> None:
    request = dra.gpu_request()
    del request["exactly"]["deviceClassName"]
    status, body = kube_stack.request(
        "POST",
        f"{dra.API}/namespaces/{namespace}/resourceclaims",
        dra.resource_claim("bad", request),
    )
    assert status == 422
    assert "deviceClassName" in body["message"]


def test_a_mig_claim_pinned_by_tessera_is_accepted_and_its_allocation_read_back(
    kube_stack: KubeStack, namespace: str
) -> None:
    node = f"mig-{uuid.uuid4().hex[:8]}"
    create_node(kube_stack, kwok_node(node))
    published = dra.mig_resource_slice(node, [("GPU-mig-0", "NVIDIA-H100-80GB-HBM3")])
    status, stored = kube_stack.request("POST", f"{dra.API}/resourceslices", published)
    assert status == 201, stored
    # the engine plans on what the API server kept of the slice, and the claim pins its choice
    cards = mig_cards_from_slices([stored])
    (placement,) = plan_mig(cards, [MigRequest("cs-mig", "1g.10gb")]).placements
    assert (placement.node, placement.gpu_index, placement.start) == (node, 0, 6)
    claim = mig_resource_claim(
        "cs-mig",
        placement,
        parent_uuid=parent_uuid([stored], node, 0) or "",
        driver=dra.DRIVER,
        device_class=dra.DRIVER,
    )
    claims = f"{dra.API}/namespaces/{namespace}/resourceclaims"
    status, created = kube_stack.request("POST", claims, claim)
    assert status == 201, created  # the CEL selector compiles on a real API server
    result = dra.allocation(node, "gpu-0-mig-1g-10gb-6")
    result["status"]["allocation"]["devices"]["results"][0]["request"] = (
        "mig"  # the claim's request
    )
    status, allocated = kube_stack.request(
        "PATCH",
        f"{claims}/cs-mig/status",
        result,
        content_type="application/merge-patch+json",
    )
    assert status == 200, allocated
    status, read = kube_stack.request("GET", f"{claims}/cs-mig")
    allocation = claim_allocation(read)
    assert allocation is not None
    assert (allocation.pool, allocation.device) == (node, "gpu-0-mig-1g-10gb-6")
