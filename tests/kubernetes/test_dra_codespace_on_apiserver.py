"""A `1g.10gb` MIG codespace through Tessera's real services in dra mode on a real API server.

The pool shares its H100s by MIG; the KWOK node h100-a publishes its cards as a MIG-partitionable
ResourceSlice. create / stop / start / delete run the scheduling cycle and the materialize and
release tasks with `TESSERA_BACKEND = "kubernetes"` in dra mode: each placement becomes a ResourceClaim
pinning the engine's instance (card, profile, start) and a pod consuming it. The test plays the DRA
scheduler and driver (writes the claim's allocation, binds the pod); KWOK runs it, the status sync sees
it running and records the allocated device on the placement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from codespaces import services
from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace
from quotas.models import QuotaGroup
from scheduling.backends import registry
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.dra import claim_name
from scheduling.backends.kubernetes.gateway import KubernetesGateway
from scheduling.models import Gpu, PlacementGpu
from scheduling.services import reconcile
from scheduling.tests.kubernetes.k8s_builders import config
from tests.kubernetes import dra
from tests.kubernetes.cluster import bind, create_node, get_pod, kwok_node, node_ready, wait_for
from tests.kubernetes.stack import KubeStack

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]

MIG_1G = services.SizeRequest(gpu_mode="mig", mig_profile="1g.10gb", gpu_count=0)
H100 = "NVIDIA-H100-80GB-HBM3"
MIG_CLASS = f"mig.{dra.DRIVER}"


@pytest.fixture
def dra_cluster(
    kube_stack: KubeStack, admin_gateway: KubernetesGateway, namespace: str, gpu_pool: QuotaGroup
) -> Iterator[KubernetesBackend]:
    """The backend in dra mode as the configured backend; the database's pool shares by MIG and its
    node h100-a is a KWOK node whose cards the driver published as a MIG slice."""
    QuotaGroup.objects.filter(pk=gpu_pool.pk).update(
        sharing_mode="mig", mig_profiles=["1g.10gb", "3g.40gb"]
    )
    uuids = list(
        Gpu.objects.filter(node__name="h100-a").order_by("index").values_list("uuid", flat=True)
    )
    create_node(kube_stack, kwok_node("h100-a", labels={"pool": "gpu"}))
    wait_for("h100-a Ready", lambda: node_ready(kube_stack, "h100-a"))
    published = dra.mig_resource_slice("h100-a", [(uuid, H100) for uuid in uuids])
    kube_stack.request("DELETE", f"{dra.API}/resourceslices/{published['metadata']['name']}")
    status, body = kube_stack.request("POST", f"{dra.API}/resourceslices", published)
    assert status == 201, body
    backend = KubernetesBackend(
        admin_gateway,
        dataclasses.replace(
            config(c.Mode.DRA),
            namespace=namespace,
            dra_driver=dra.DRIVER,
            dra_device_classes=((dra.DRIVER, "gpu"), (MIG_CLASS, "mig")),
        ),
    )
    registry.reset_backends()
    registry._instances["kubernetes"] = backend
    with override_settings(TESSERA_BACKEND="kubernetes"):
        yield backend
    registry.reset_backends()


def pod_name(codespace: Codespace) -> str:
    return f"cs-{codespace.name}-{codespace.workload_id}"


def play_dra_scheduler(stack: KubeStack, namespace: str, pod: str) -> str:
    """What kube-scheduler's DRA plugin does with the pod's claim: allocate the one device its CEL
    selector admits (read from the claim, as the scheduler evaluates it), then bind the pod."""
    claims = f"{dra.API}/namespaces/{namespace}/resourceclaims"
    status, claim = stack.request("GET", f"{claims}/{claim_name(pod)}")
    assert status == 200, claim
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == MIG_CLASS
    expression = request["exactly"]["selectors"][0]["cel"]["expression"]
    assert '.profile == "1g.10gb"' in expression
    start = int(expression.split('"memorySlice', 1)[1].split('"', 1)[0])
    device = f"gpu-0-mig-1g-10gb-{start}"
    allocation = dra.allocation("h100-a", device)
    allocation["status"]["allocation"]["devices"]["results"][0]["request"] = request["name"]
    status, body = stack.request(
        "PATCH",
        f"{claims}/{claim_name(pod)}/status",
        allocation,
        content_type="application/merge-patch+json",
    )
    assert status == 200, body
    bind(stack, namespace, pod, "h100-a")
    return f"{dra.DRIVER}/h100-a/{device}"


def status_sync_until(capture: Any, codespace: Codespace, state: str) -> None:
    def synced() -> bool:
        with capture(execute=True):
            reconcile.sync_status()
        codespace.refresh_from_db()
        return bool(codespace.state == state)

    wait_for(f"codespace {state}", synced)


def active_instances() -> list[tuple[str, int, str, int | None, str]]:
    return [
        (s.gpu.node.name, s.gpu.index, s.mig_profile, s.mig_start, s.allocated_device)
        for s in PlacementGpu.objects.filter(placement__released_at__isnull=True).select_related(
            "gpu__node"
        )
    ]


def test_a_1g_codespace_runs_stops_starts_and_is_deleted_in_dra_mode(
    dra_cluster: KubernetesBackend,
    kube_stack: KubeStack,
    admin_gateway: KubernetesGateway,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    ns = dra_cluster.config.namespace
    with capture(execute=True):
        codespace = services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", name="bob-mig", size=MIG_1G
        )
    codespace.refresh_from_db()
    first = pod_name(codespace)
    pod = get_pod(kube_stack, ns, first)
    assert pod is not None
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimName": claim_name(first)}
    ]
    device = play_dra_scheduler(kube_stack, ns, first)
    status_sync_until(capture, codespace, S.RUNNING)
    assert active_instances() == [("h100-a", 0, "1g.10gb", 6, device)]

    # stop: pod and claim go (the driver frees the instance), the home stays
    with capture(execute=True):
        services.stop_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.STOPPED
    wait_for("first pod gone", lambda: get_pod(kube_stack, ns, first) is None)
    assert admin_gateway.get_resource_claim(ns, claim_name(first)) is None
    assert active_instances() == []

    # start: a new workload, a new claim pinning the same free position, running again
    with capture(execute=True):
        services.start_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    second = pod_name(codespace)
    assert second != first
    assert admin_gateway.get_resource_claim(ns, claim_name(second)) is not None
    device = play_dra_scheduler(kube_stack, ns, second)
    status_sync_until(capture, codespace, S.RUNNING)
    assert active_instances() == [("h100-a", 0, "1g.10gb", 6, device)]

    # delete: pod and claim gone, nothing of the codespace holds a device
    with capture(execute=True):
        services.delete_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.DELETED
    wait_for("second pod gone", lambda: get_pod(kube_stack, ns, second) is None)
    assert admin_gateway.get_resource_claim(ns, claim_name(second)) is None
    assert admin_gateway.list_resource_claims(ns, c.MANAGED_SELECTOR) == []
