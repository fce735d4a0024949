"""A codespace's life through Tessera's real services on a real API server with a KWOK GPU node.

codespaces.services create / stop / start / delete, the scheduling cycle, the materialize and
release tasks and beat's status sync run with `TESSERA_BACKEND = "kubernetes"`; the pod is bound by
whoever binds in the mode (the test plays hami-scheduler and koord-scheduler, Tessera binds in
hami-bind) and KWOK makes it Running, which the status sync sees through its watch.
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
from scheduling.backends import registry
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.gateway import KubernetesGateway
from scheduling.backends.kubernetes.interface import Kind
from scheduling.models import Gpu, Node, Workload
from scheduling.services import reconcile
from scheduling.tasks import reconcile_backend_orphans_task, sync_inventory_task
from scheduling.tests.kubernetes.k8s_builders import config, hami_register_json
from tests.kubernetes.cluster import (
    create_node,
    get_pod,
    kwok_node,
    node_ready,
    play_hami_scheduler,
    play_koord_scheduler,
    wait_for,
)
from tests.kubernetes.stack import KubeStack

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]


@pytest.fixture(params=c.DEVICE_PLUGIN_MODES)
def cluster(
    request: Any,
    kube_stack: KubeStack,
    admin_gateway: KubernetesGateway,
    namespace: str,
    gpu_pool: Any,
) -> Iterator[KubernetesBackend]:
    """The Kubernetes backend of one mode as the configured backend; the database's node h100-a
    is a KWOK node whose GPUs HAMi registered."""
    uuids = list(
        Gpu.objects.filter(node__name="h100-a").order_by("index").values_list("uuid", flat=True)
    )
    create_node(
        kube_stack,
        kwok_node(
            "h100-a",
            labels={"pool": "gpu"},
            annotations={c.HAMI_NODE_REGISTER: hami_register_json(*uuids)},
        ),
    )
    wait_for("h100-a Ready", lambda: node_ready(kube_stack, "h100-a"))
    backend = KubernetesBackend(
        admin_gateway, dataclasses.replace(config(request.param), namespace=namespace)
    )
    registry.reset_backends()
    registry._instances["kubernetes"] = backend
    with override_settings(TESSERA_BACKEND="kubernetes"):
        yield backend
    registry.reset_backends()


def cluster_name(codespace: Codespace) -> str:
    return f"cs-{codespace.name}-{codespace.workload_id}"


def schedule(stack: KubeStack, backend: KubernetesBackend, pod: str) -> None:
    """What the mode's scheduler does with the pod Tessera created (hami-bind: Tessera did it)."""
    namespace = backend.config.namespace
    if backend.config.mode == c.Mode.HAMI_DELEGATE:
        play_hami_scheduler(stack, namespace, pod, "h100-a")
    elif backend.config.mode == c.Mode.KOORDINATOR:
        play_koord_scheduler(stack, namespace, pod)


def status_sync_until(capture: Any, codespace: Codespace, state: str) -> None:
    """Run beat's status sync until the codespace reaches `state` (KWOK runs pods in ~1 s)."""

    def synced() -> bool:
        with capture(execute=True):
            reconcile.sync_status()
        codespace.refresh_from_db()
        return bool(codespace.state == state)

    wait_for(f"codespace {state}", synced)


def gone(stack: KubeStack, namespace: str, pod: str) -> None:
    wait_for(f"pod {pod} gone", lambda: get_pod(stack, namespace, pod) is None)


def create_running(
    capture: Any, stack: KubeStack, backend: KubernetesBackend, owner: Any, tenant: Any
) -> tuple[Codespace, str]:
    """The flows' common start: `owner` creates "bob-dev" (a quarter of an H100), its pod is
    scheduled on the KWOK node and the status sync sees it running. Returns it and its pod's name."""
    with capture(execute=True):
        codespace = services.create_codespace(
            user=owner, tenant=tenant, template="pytorch", preset="quarter-h100", name="bob-dev"
        )
    codespace.refresh_from_db()
    name = cluster_name(codespace)
    assert get_pod(stack, backend.config.namespace, name) is not None
    schedule(stack, backend, name)
    status_sync_until(capture, codespace, S.RUNNING)
    return codespace, name


def test_create_running_stop_start_delete_on_a_real_api_server(
    cluster: KubernetesBackend,
    kube_stack: KubeStack,
    admin_gateway: KubernetesGateway,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    ns = cluster.config.namespace
    codespace, first = create_running(capture, kube_stack, cluster, bob, team_a)
    assert admin_gateway.get(Kind.SERVICE, ns, first) is not None
    assert get_pod(kube_stack, ns, first)["status"]["phase"] == "Running"  # type: ignore[index]

    # stop: pod and Service go, the home claim stays
    with capture(execute=True):
        services.stop_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.STOPPED
    gone(kube_stack, ns, first)
    assert admin_gateway.get(Kind.SERVICE, ns, first) is None
    kept = admin_gateway.get(Kind.PVC, ns, codespace.home_volume_name)
    assert kept is not None
    assert kept["spec"]["resources"]["requests"]["storage"] == f"{codespace.home_gib}Gi"

    # start: a new workload and pod mounting the same claim
    with capture(execute=True):
        services.start_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    second = cluster_name(codespace)
    assert second != first
    pod = get_pod(kube_stack, ns, second)
    assert pod is not None
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]]
    assert claims == [codespace.home_volume_name]
    home = admin_gateway.get(Kind.PVC, ns, codespace.home_volume_name)
    assert home["metadata"]["uid"] == kept["metadata"]["uid"]  # type: ignore[index]
    schedule(kube_stack, cluster, second)
    status_sync_until(capture, codespace, S.RUNNING)

    # delete: pod and Service gone, the claim deleted (its pvc-protection finalizer is the
    # controller-manager's to lift, which this control plane does not run)
    with capture(execute=True):
        services.delete_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.DELETED
    gone(kube_stack, ns, second)
    assert admin_gateway.get(Kind.SERVICE, ns, second) is None
    home = admin_gateway.get(Kind.PVC, ns, codespace.home_volume_name)
    assert home is None or home["metadata"].get("deletionTimestamp")


@pytest.mark.parametrize("cluster", [c.Mode.HAMI_DELEGATE], indirect=True)
def test_pod_deleted_behind_tesseras_back_is_requeued_and_recreated(
    cluster: KubernetesBackend,
    kube_stack: KubeStack,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    ns = cluster.config.namespace
    codespace, name = create_running(capture, kube_stack, cluster, bob, team_a)
    uid = get_pod(kube_stack, ns, name)["metadata"]["uid"]  # type: ignore[index]
    # given someone runs `kubectl delete pod`; KWOK (the node) finishes the graceful deletion
    status, _ = kube_stack.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
    assert status == 200
    wait_for(
        "the pod deleted or recreated",
        lambda: (p := get_pod(kube_stack, ns, name)) is None or p["metadata"]["uid"] != uid,
    )
    # when beat's status sync sees it MISSING: requeued, placed again, its pod recreated
    status_sync_until(capture, codespace, S.STARTING)
    workload = Workload.objects.get(pk=codespace.workload_id)
    assert workload.state == "placed"
    recreated = get_pod(kube_stack, ns, name)
    assert recreated is not None
    assert recreated["metadata"]["uid"] != uid
    schedule(kube_stack, cluster, name)
    status_sync_until(capture, codespace, S.RUNNING)


@pytest.mark.parametrize("cluster", [c.Mode.HAMI_DELEGATE], indirect=True)
def test_orphan_reconciler_deletes_only_pods_of_inactive_workloads(
    cluster: KubernetesBackend,
    kube_stack: KubeStack,
    admin_gateway: KubernetesGateway,
) -> None:
    ns = cluster.config.namespace
    orphan = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "cs-old-1",
            "labels": {c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE, c.WORKLOAD_ID_LABEL: "999999"},
        },
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "workspace", "image": "busybox"}],
        },
    }
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "someone-else"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    admin_gateway.create(Kind.POD, ns, orphan)
    admin_gateway.create(Kind.POD, ns, foreign)
    # the real API server filters by Tessera's label selector: only the orphan is listed
    assert [o.name for o in cluster.list_objects()] == ["cs-old-1"]
    result = reconcile_backend_orphans_task.delay().get()
    assert result == {"deleted_orphans": 1, "rematerialized": 0, "requeued": 0}
    gone(kube_stack, ns, "cs-old-1")
    assert get_pod(kube_stack, ns, "someone-else") is not None


@pytest.mark.parametrize("cluster", [c.Mode.HAMI_DELEGATE], indirect=True)
def test_inventory_sync_upserts_kwok_nodes_and_their_gpus(
    cluster: KubernetesBackend, kube_stack: KubeStack
) -> None:
    create_node(
        kube_stack,
        kwok_node(
            "h100-b",
            labels={"pool": "gpu"},
            annotations={c.HAMI_NODE_REGISTER: hami_register_json("GPU-b0", "GPU-b1")},
        ),
    )
    wait_for("h100-b Ready", lambda: node_ready(kube_stack, "h100-b"))
    sync_inventory_task.delay().get()
    node = Node.objects.get(name="h100-b")
    assert (node.pool, node.cpu_milli, node.memory_mib) == ("gpu", 64000, 512 * 1024)
    assert list(node.gpus.order_by("index").values_list("index", "uuid", "healthy")) == [
        (0, "GPU-b0", True),
        (1, "GPU-b1", True),
    ]
