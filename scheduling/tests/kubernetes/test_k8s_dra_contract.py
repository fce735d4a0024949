"""DRA through the one gateway, over HTTP against kmock: MIG cards read from published ResourceSlices, the
engine's choice sent as a pinned ResourceClaim, its allocation read back, the claim deleted."""

from __future__ import annotations

import json
from collections.abc import Iterator

import kubernetes_validate
import pytest
from k8s_apiserver import LoopbackApiServer
from k8s_builders import codespace, config
from kubernetes import client

from core.placement.mig import MigRequest, plan_mig
from scheduling.backends.base import GpuBinding
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.dra import claim_name
from scheduling.backends.kubernetes.gateway import KubernetesGateway
from scheduling.backends.kubernetes.mig import (
    claim_allocation,
    mig_cards_from_slices,
    mig_resource_claim,
    parent_uuid,
)
from tests.kubernetes import dra

NAMESPACE = "tessera-workloads"
H100 = "NVIDIA-H100-80GB-HBM3"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"


@pytest.fixture
def apiserver() -> Iterator[LoopbackApiServer]:
    with LoopbackApiServer() as server:
        for node, cards in (("h100-03", [("GPU-a", H100)]), ("h100-04", [("GPU-b", H100)])):
            server.add_object(
                "resource.k8s.io/v1/resourceslices", None, dra.mig_resource_slice(node, cards)
            )
        yield server


@pytest.fixture
def gateway(apiserver: LoopbackApiServer) -> KubernetesGateway:
    configuration = client.Configuration(host=apiserver.url)
    return KubernetesGateway(client.ApiClient(configuration), connect_timeout=2, read_timeout=5)


def test_a_1g_10gb_instance_goes_from_slices_to_a_claim_and_back(
    apiserver: LoopbackApiServer, gateway: KubernetesGateway
) -> None:
    slices = gateway.list_resource_slices()
    assert sorted(s["spec"]["nodeName"] for s in slices) == ["h100-03", "h100-04"]
    cards = mig_cards_from_slices(slices)
    (placement,) = plan_mig(cards, [MigRequest("cs-alice", "1g.10gb")]).placements
    assert (placement.node, placement.gpu_index, placement.start) == ("h100-03", 0, 6)
    assert parent_uuid(slices, "h100-04", 0) == "GPU-b"
    claim = mig_resource_claim(
        "cs-alice-mig",
        placement,
        parent_uuid=parent_uuid(slices, placement.node, placement.gpu_index) or "",
        driver=dra.DRIVER,
        device_class="mig.gpu.tessera.test",
        namespace=NAMESPACE,
    )
    for version in ("1.34", "1.35"):
        kubernetes_validate.validate(claim, version, strict=True)

    created = gateway.create_resource_claim(NAMESPACE, claim)

    (request,) = apiserver.requests(lambda r: r.method == "POST" and r.url.path == CLAIMS)
    assert json.loads(request.body) == claim  # the claim goes out unchanged
    assert created["metadata"]["name"] == "cs-alice-mig"
    fetched = gateway.get_resource_claim(NAMESPACE, "cs-alice-mig")
    assert fetched is not None
    assert claim_allocation(fetched) is None  # not allocated yet
    # when the scheduler allocates the pinned device, the allocation is read back
    allocated = {**fetched, **dra.allocation("h100-03", "gpu-0-mig-1g-10gb-6")}
    apiserver.add_object("resource.k8s.io/v1/resourceclaims", NAMESPACE, allocated)
    read_back = gateway.get_resource_claim(NAMESPACE, "cs-alice-mig")
    assert read_back is not None
    allocation = claim_allocation(read_back)
    assert allocation is not None
    assert (allocation.pool, allocation.device) == ("h100-03", "gpu-0-mig-1g-10gb-6")
    # and the next inventory sees the instance in use (one node's slices: the field selector is sent;
    # kmock does not filter by it, a real API server does)
    one_node = gateway.list_resource_slices("h100-03")
    (listed,) = apiserver.requests(
        lambda r: r.method == "GET" and "fieldSelector=spec.nodeName%3Dh100-03" in str(r.url)
    )
    assert listed.url.path == "/apis/resource.k8s.io/v1/resourceslices"
    cards = mig_cards_from_slices(one_node, [(allocation.pool, allocation.device)])
    assert [(c.node, [(i.profile, i.start) for i in c.instances]) for c in cards] == [
        ("h100-03", [("1g.10gb", 6)]),
        ("h100-04", []),
    ]
    (second,) = plan_mig(cards, [MigRequest("cs-bob", "1g.10gb")]).placements
    assert (second.node, second.start) == (
        "h100-03",
        4,
    )  # beside it: the 4g and 3g at 0 stay placeable
    assert gateway.delete_resource_claim(NAMESPACE, "cs-alice-mig") is True
    assert gateway.get_resource_claim(NAMESPACE, "cs-alice-mig") is None
    assert gateway.delete_resource_claim(NAMESPACE, "cs-alice-mig") is False


def test_the_backend_in_dra_mode_sends_the_claim_before_the_pod_and_reads_its_allocation(
    apiserver: LoopbackApiServer, gateway: KubernetesGateway
) -> None:
    backend = KubernetesBackend(gateway, config(c.Mode.DRA, dra_driver=dra.DRIVER))
    apiserver.add_object(
        "v1/nodes",
        None,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "h100-03"},
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    (node,) = backend.sync_inventory()  # h100-04 publishes a slice but has no Node: not listed
    assert (node.name, [(g.index, g.uuid, g.healthy) for g in node.gpus]) == (
        "h100-03",
        [(0, "GPU-a", True)],
    )
    binding = GpuBinding(0, "GPU-a", 142, 10240, mig_profile="1g.10gb", mig_start=6)
    request = codespace(node_name="h100-03", gpus=(binding,), home_volume_gib=0, placement_id=5)

    backend.materialize(request)

    posts = [
        r.url.path
        for r in apiserver.requests(lambda r: r.method == "POST")
        if r.url.path.endswith(("resourceclaims", "pods"))
    ]
    assert posts == [CLAIMS, f"/api/v1/namespaces/{NAMESPACE}/pods"]
    (sent,) = apiserver.requests(lambda r: r.method == "POST" and r.url.path == CLAIMS)
    claim = json.loads(sent.body)
    for version in ("1.34", "1.35"):
        kubernetes_validate.validate(claim, version, strict=True)
    expression = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
    assert 'parentUUID == "GPU-a"' in expression["expression"]
    # the scheduler allocates the pinned instance; the status sync reads it back in one list
    allocated = {**claim, **dra.allocation("h100-03", "gpu-0-mig-1g-10gb-6")}
    allocated["status"]["allocation"]["devices"]["results"][0]["request"] = "gpu-0"
    apiserver.add_object("resource.k8s.io/v1/resourceclaims", NAMESPACE, allocated)
    (report,) = backend.sync_status([7])
    assert report.allocated_devices == ((0, f"{dra.DRIVER}/h100-03/gpu-0-mig-1g-10gb-6"),)
    (listed,) = apiserver.requests(lambda r: r.method == "GET" and r.url.path == CLAIMS)
    assert "labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtessera" in str(listed.url)

    backend.release(7, request.name, delete_home=False, placement_id=5)
    assert gateway.get_resource_claim(NAMESPACE, claim_name(request.name)) is None
