"""The codespace flow of the simulated backend, with the Kubernetes backend against the harness.

The real services run (codespaces.services create / stop / start / delete, the scheduling cycle, the
materialize and release tasks, the status sync), with `TESSERA_BACKEND = "kubernetes"` and the
backend talking through the official `kubernetes` client to kmock's loopback API server
(`k8s_apiserver.py`). The harness plays kubelet: it marks the pod Running.

The home PVC is not asserted while present: the services do not pass a home size to the backend
yet (docs/kubernetes.md, "Known gap"); the backend's own PVC handling (kept on stop, deleted on
delete) is covered in test_k8s_backend.py and test_k8s_contract.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from kubernetes import client

from codespaces import services
from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace
from scheduling.backends import registry
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.gateway import KubernetesGateway
from scheduling.backends.kubernetes.interface import Kind
from scheduling.models import Gpu, Node, Placement, Workload
from scheduling.services import reconcile
from scheduling.tasks import reconcile_backend_orphans_task, sync_inventory_task
from scheduling.tests.kubernetes.k8s_apiserver import LoopbackApiServer
from scheduling.tests.kubernetes.k8s_builders import NAMESPACE, config, hami_register_json

pytestmark = pytest.mark.django_db

RUNNING = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


@pytest.fixture
def apiserver() -> Iterator[LoopbackApiServer]:
    with LoopbackApiServer() as server:
        yield server


@pytest.fixture(params=[c.Mode.HAMI_DELEGATE, c.Mode.HAMI_BIND, c.Mode.KOORDINATOR])
def cluster(
    request: Any, apiserver: LoopbackApiServer, gpu_pool: Any
) -> Iterator[tuple[KubernetesBackend, KubernetesGateway]]:
    """The Kubernetes backend of one mode as the configured backend, over the real client."""
    mode = request.param
    uuids = list(
        Gpu.objects.filter(node__name="h100-a").order_by("index").values_list("uuid", flat=True)
    )
    apiserver.add_object(
        "v1/nodes",
        None,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "h100-a",
                "labels": {"kubernetes.io/hostname": "h100-a", "pool": "gpu"},
                "annotations": {c.HAMI_NODE_REGISTER: hami_register_json(*uuids)},
            },
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    gateway = KubernetesGateway(
        client.ApiClient(client.Configuration(host=apiserver.url)),
        connect_timeout=2,
        read_timeout=5,
    )
    backend = KubernetesBackend(gateway, config(mode))
    registry.reset_backends()
    registry._instances["kubernetes"] = backend
    with override_settings(TESSERA_BACKEND="kubernetes"):
        yield backend, gateway
    registry.reset_backends()


def objects(gateway: KubernetesGateway, name: str) -> dict[str, bool]:
    return {
        "pod": gateway.get(Kind.POD, NAMESPACE, name) is not None,
        "service": gateway.get(Kind.SERVICE, NAMESPACE, name) is not None,
    }


def home(gateway: KubernetesGateway, codespace: Codespace) -> Any:
    """The codespace's home PVC (one per codespace, named for it, not for a workload), or None."""
    return gateway.get(Kind.PVC, NAMESPACE, codespace.home_volume_name)


def status_sync(capture: Any) -> None:
    """What beat does: ask the backend about active workloads and apply it (observers on commit)."""
    with capture(execute=True):
        reconcile.sync_status()


def cluster_name(codespace: Codespace) -> str:
    return f"cs-{codespace.name}-{codespace.workload_id}"


def test_create_running_stop_start_delete_on_the_cluster(
    cluster: tuple[KubernetesBackend, KubernetesGateway],
    apiserver: LoopbackApiServer,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    backend, gateway = cluster
    mode = backend.config.mode
    capture = django_capture_on_commit_callbacks

    # create: the cycle places it, the materialize task creates the Pod and its Service
    with capture(execute=True):
        codespace = services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", preset="quarter-h100", name="bob-dev"
        )
    codespace.refresh_from_db()
    first = cluster_name(codespace)
    placement = Placement.objects.get(workload_id=codespace.workload_id)
    share = placement.gpu_shares.select_related("gpu").get()
    pod = gateway.get(Kind.POD, NAMESPACE, first)
    assert pod is not None
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert (codespace.state, placement.node.name) == (S.STARTING, "h100-a")
    assert labels[c.WORKLOAD_ID_LABEL] == str(codespace.workload_id)
    assert (labels[c.WORKLOAD_KIND_LABEL], labels[c.TENANT_LABEL]) == ("codespace", "team-a")
    if mode == c.Mode.HAMI_DELEGATE:
        assert annotations[c.HAMI_USE_GPUUUID] == share.gpu.uuid
        assert (limits[c.HAMI_GPU], limits[c.HAMI_GPUCORES], limits[c.HAMI_GPUMEM]) == (
            "1",
            "25",
            "20480",
        )
        assert pod["spec"]["schedulerName"] == "hami-scheduler"
    elif mode == c.Mode.HAMI_BIND:
        assert annotations[c.HAMI_VGPU_NODE] == "h100-a"
        assert annotations[c.HAMI_DEVICES_TO_ALLOCATE] == f"{share.gpu.uuid},NVIDIA,20480,25:;"
        assert pod["spec"]["nodeName"] == "h100-a"  # bound by Tessera through pods/binding
        assert pod["spec"]["schedulerName"] == "tessera"
    else:
        hint = json.loads(annotations[c.KOORD_SCHEDULING_HINT])
        allocated = json.loads(annotations[c.KOORD_DEVICE_ALLOCATED])
        assert hint["nodeNames"] == ["h100-a"]
        assert [g["minor"] for g in allocated["gpu"]] == [share.gpu.index]
        assert pod["spec"]["schedulerName"] == "koord-scheduler"
    assert objects(gateway, first)["service"] is True

    # the pod is still Pending: the status sync leaves the codespace STARTING
    status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.STARTING

    # kubelet starts the pod: the next status sync makes the codespace RUNNING
    apiserver.set_pod_status(NAMESPACE, first, RUNNING)
    status_sync(capture)
    codespace.refresh_from_db()
    assert (codespace.state, codespace.workload.state) == (S.RUNNING, "running")

    # stop: pod and Service gone
    with capture(execute=True):
        services.stop_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.STOPPED
    assert objects(gateway, first) == {"pod": False, "service": False}
    # ... and the home volume is kept, with its size from the template
    kept = home(gateway, codespace)
    assert kept is not None
    assert kept["spec"]["resources"]["requests"]["storage"] == f"{codespace.home_gib}Gi"

    # start: a new workload, placed again, a new pod on the new placement
    with capture(execute=True):
        services.start_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    second = cluster_name(codespace)
    placement = Placement.objects.get(workload_id=codespace.workload_id, released_at__isnull=True)
    pod = gateway.get(Kind.POD, NAMESPACE, second)
    assert pod is not None
    assert second != first
    assert pod["metadata"]["labels"][c.WORKLOAD_ID_LABEL] == str(codespace.workload_id)
    # the new pod mounts the same home volume (the very object kept at stop)
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]]
    assert claims == [codespace.home_volume_name]
    assert (
        home(gateway, codespace)["metadata"]["resourceVersion"]
        == kept["metadata"]["resourceVersion"]
    )
    assert (codespace.state, codespace.node_name, placement.node.name) == (
        S.STARTING,
        "h100-a",
        "h100-a",
    )
    apiserver.set_pod_status(NAMESPACE, second, RUNNING)
    status_sync(capture)  # the tracker resumes its watch: it sees the new pod and its status
    codespace.refresh_from_db()
    assert codespace.state == S.RUNNING

    # delete: every object of the codespace is gone
    with capture(execute=True):
        services.delete_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.DELETED
    assert objects(gateway, second) == {"pod": False, "service": False}
    assert objects(gateway, first) == {"pod": False, "service": False}
    assert home(gateway, codespace) is None
    assert gateway.list_pods(NAMESPACE, c.MANAGED_SELECTOR)[0] == []


def running_codespace(
    bob: Any, team_a: Any, apiserver: LoopbackApiServer, capture: Any
) -> tuple[Codespace, str]:
    with capture(execute=True):
        codespace = services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", preset="quarter-h100", name="bob-dev"
        )
    codespace.refresh_from_db()
    name = cluster_name(codespace)
    apiserver.set_pod_status(NAMESPACE, name, RUNNING)
    status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.RUNNING
    return codespace, name


@pytest.mark.parametrize("cluster", [c.Mode.HAMI_DELEGATE], indirect=True)
def test_pod_deleted_outside_tessera_requeues_and_recreates_it(
    cluster: tuple[KubernetesBackend, KubernetesGateway],
    apiserver: LoopbackApiServer,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    _, gateway = cluster
    codespace, name = running_codespace(bob, team_a, apiserver, django_capture_on_commit_callbacks)
    # given someone runs `kubectl delete pod` on the running codespace
    assert gateway.delete(Kind.POD, NAMESPACE, name) is True
    # when beat's status sync sees the pod MISSING
    status_sync(django_capture_on_commit_callbacks)
    # then the workload was requeued, placed again by the cycle, and its pod recreated
    codespace.refresh_from_db()
    workload = Workload.objects.get(pk=codespace.workload_id)
    assert (workload.state, codespace.state) == ("placed", S.STARTING)
    pod = gateway.get(Kind.POD, NAMESPACE, name)
    assert pod is not None
    assert pod["metadata"]["labels"][c.WORKLOAD_ID_LABEL] == str(workload.pk)
    assert list(codespace.events.order_by("id").values_list("to_state", "message"))[-4:] == [
        (S.QUEUED, "Requeued by the scheduler: Requeued: its pod disappeared from the cluster."),
        ("", "Waiting: Requeued: its pod disappeared from the cluster."),
        (S.PLACED, "Placed on h100-a gpu0 H100"),
        (S.STARTING, "Starting the container and mounting the home volume."),
    ]


@pytest.mark.parametrize("cluster", [c.Mode.HAMI_DELEGATE], indirect=True)
def test_orphan_reconciler_deletes_pods_of_inactive_workloads_only(
    cluster: tuple[KubernetesBackend, KubernetesGateway],
    apiserver: LoopbackApiServer,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    _, gateway = cluster
    codespace, name = running_codespace(bob, team_a, apiserver, django_capture_on_commit_callbacks)
    # given a pod left behind by a workload Tessera released (its release never reached the
    # cluster), and a pod that is not Tessera's at all
    orphan = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "cs-old-1",
            "labels": {c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE, c.WORKLOAD_ID_LABEL: "999999"},
        },
        "spec": {"containers": [{"name": "workspace", "image": "busybox"}]},
    }
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "someone-else"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    gateway.create(Kind.POD, NAMESPACE, orphan)
    gateway.create(Kind.POD, NAMESPACE, foreign)
    # when beat runs the orphan reconciler
    result = reconcile_backend_orphans_task.delay().get()
    # then only the orphan is gone; the running codespace's pod and the foreign pod stay
    assert result == {"deleted_orphans": 1, "rematerialized": 0, "requeued": 0}
    assert gateway.get(Kind.POD, NAMESPACE, "cs-old-1") is None
    assert gateway.get(Kind.POD, NAMESPACE, name) is not None
    assert gateway.get(Kind.POD, NAMESPACE, "someone-else") is not None
    assert reconcile_backend_orphans_task.delay().get() == {
        "deleted_orphans": 0,
        "rematerialized": 0,
        "requeued": 0,
    }


@pytest.mark.parametrize("cluster", [c.Mode.HAMI_DELEGATE], indirect=True)
def test_inventory_sync_upserts_nodes_and_gpus_from_the_cluster(
    cluster: tuple[KubernetesBackend, KubernetesGateway], apiserver: LoopbackApiServer
) -> None:
    # given the cluster gained a node whose two GPUs HAMi registered
    apiserver.add_object(
        "v1/nodes",
        None,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "h100-b",
                "labels": {"kubernetes.io/hostname": "h100-b", "pool": "gpu"},
                "annotations": {c.HAMI_NODE_REGISTER: hami_register_json("GPU-b0", "GPU-b1")},
            },
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    # when beat's inventory sync runs
    result = sync_inventory_task.delay().get()
    # then the node and its GPUs are rows the scheduler can place on
    node = Node.objects.get(name="h100-b")
    assert result["created_nodes"] == 1
    assert (node.pool, node.cpu_milli, node.memory_mib) == ("gpu", 64000, 512 * 1024)
    assert list(node.gpus.order_by("index").values_list("index", "uuid", "memory_mib")) == [
        (0, "GPU-b0", 81920),
        (1, "GPU-b1", 81920),
    ]
