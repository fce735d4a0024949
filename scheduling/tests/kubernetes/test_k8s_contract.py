"""Contract tests: the real `kubernetes` client (through KubernetesGateway) over HTTP against kmock.

They pin the request shapes Tessera sends (paths, bodies, query parameters, patch content type,
`pods/binding` read with `_preload_content=False`) and how answers map back (409, 410, 5xx, 4xx,
timeouts). What kmock 0.8 cannot do by itself is listed in k8s_apiserver.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from k8s_apiserver import LoopbackApiServer
from k8s_builders import GPU_A, NAMESPACE, NOW, codespace, config, hami_register_json
from kubernetes import client

from scheduling.backends.base import ObservedPhase, StatusReport
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.binding import acquire_node_lock
from scheduling.backends.kubernetes.constants import Mode
from scheduling.backends.kubernetes.gateway import KubernetesGateway
from scheduling.backends.kubernetes.interface import ClusterApiError, Kind, WatchExpired
from scheduling.backends.kubernetes.manifests import build_pod
from scheduling.backends.kubernetes.status import PodTracker

POD_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"


@pytest.fixture
def apiserver() -> Iterator[LoopbackApiServer]:
    with LoopbackApiServer() as server:
        server.add_object(
            "v1/nodes",
            None,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": "gpu-node-3",
                    "labels": {"kubernetes.io/hostname": "gpu-node-3"},
                    "annotations": {"hami.io/node-nvidia-register": hami_register_json(GPU_A)},
                },
                "status": {
                    "allocatable": {"cpu": "32", "memory": "256Gi"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
        yield server


@pytest.fixture
def gateway(apiserver: LoopbackApiServer) -> KubernetesGateway:
    configuration = client.Configuration(host=apiserver.url)
    return KubernetesGateway(client.ApiClient(configuration), connect_timeout=2, read_timeout=5)


def sent(apiserver: LoopbackApiServer, method: str, path: str) -> list:
    return apiserver.requests(lambda r: r.method == method and r.url.path == path)


def test_create_get_delete_round_trip_and_409_on_duplicate(apiserver, gateway):
    pod = build_pod(codespace(), config(), now=NOW)

    created = gateway.create(Kind.POD, NAMESPACE, pod)
    with pytest.raises(ClusterApiError) as duplicate:
        gateway.create(Kind.POD, NAMESPACE, pod)
    fetched = gateway.get(Kind.POD, NAMESPACE, "cs-alice-7f3k")

    (request, _) = sent(apiserver, "POST", POD_PATH)
    assert json.loads(request.body) == pod  # the manifest goes out unchanged, as JSON
    assert created["metadata"]["resourceVersion"]
    assert fetched is not None
    assert fetched["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == GPU_A
    assert (duplicate.value.status, duplicate.value.is_conflict) == (409, True)
    assert duplicate.value.permanent is False
    assert gateway.get(Kind.POD, NAMESPACE, "nope") is None
    assert gateway.delete(Kind.POD, NAMESPACE, "cs-alice-7f3k") is True
    assert gateway.delete(Kind.POD, NAMESPACE, "cs-alice-7f3k") is False
    assert gateway.get(Kind.POD, NAMESPACE, "cs-alice-7f3k") is None


def test_pvc_and_service_use_their_own_endpoints(apiserver, gateway):
    gateway.create(
        Kind.PVC,
        NAMESPACE,
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "h"}},
    )
    gateway.create(
        Kind.SERVICE, NAMESPACE, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}
    )

    assert (
        len(sent(apiserver, "POST", f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims")) == 1
    )
    assert len(sent(apiserver, "POST", f"/api/v1/namespaces/{NAMESPACE}/services")) == 1
    assert gateway.get(Kind.PVC, NAMESPACE, "h") is not None
    assert gateway.get(Kind.SERVICE, NAMESPACE, "s") is not None


def test_hami_bind_sends_cas_node_patch_then_binding(apiserver, gateway):
    backend = KubernetesBackend(gateway, config(Mode.HAMI_BIND), clock=lambda: NOW)

    backend.materialize(codespace())

    (lock_patch,) = sent(apiserver, "PATCH", "/api/v1/nodes/gpu-node-3")
    assert lock_patch.headers["Content-Type"] == "application/strategic-merge-patch+json"
    lock_meta = json.loads(lock_patch.body)["metadata"]
    assert lock_meta["annotations"]["hami.io/mutex.lock"].endswith(f",{NAMESPACE},cs-alice-7f3k")
    assert lock_meta["resourceVersion"] == "1"  # the node's version when we read it
    (binding,) = sent(apiserver, "POST", f"{POD_PATH}/cs-alice-7f3k/binding")
    assert json.loads(binding.body) == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "cs-alice-7f3k"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-3"},
    }
    pod = gateway.get(Kind.POD, NAMESPACE, "cs-alice-7f3k")
    assert pod is not None
    assert pod["spec"]["nodeName"] == "gpu-node-3"
    assert pod["metadata"]["annotations"]["hami.io/bind-phase"] == "allocating"
    with pytest.raises(ClusterApiError) as again:
        gateway.bind_pod(NAMESPACE, "cs-alice-7f3k", "gpu-node-3")
    assert again.value.status == 409


def test_node_cas_patch_with_stale_version_answers_409(gateway):
    node = gateway.get_node("gpu-node-3")
    assert node is not None
    rv = node["metadata"]["resourceVersion"]

    patched = gateway.cas_patch_node_annotations("gpu-node-3", {"hami.io/mutex.lock": "x"}, rv)
    with pytest.raises(ClusterApiError) as stale:
        gateway.cas_patch_node_annotations("gpu-node-3", {"hami.io/mutex.lock": "y"}, rv)
    cleared = gateway.cas_patch_node_annotations(
        "gpu-node-3", {"hami.io/mutex.lock": None}, patched["metadata"]["resourceVersion"]
    )

    assert patched["metadata"]["annotations"]["hami.io/mutex.lock"] == "x"
    assert (stale.value.status, stale.value.permanent) == (409, False)
    assert "hami.io/mutex.lock" not in cleared["metadata"]["annotations"]


def test_node_lock_retries_when_another_writer_wins_the_race(apiserver, gateway):
    class RacingGateway(KubernetesGateway):
        """After our first read, someone else patches the node: our version is stale."""

        raced = False

        def get_node(self, name: str):
            node = super().get_node(name)
            if not self.raced and node is not None:
                self.raced = True
                rv = node["metadata"]["resourceVersion"]
                super().cas_patch_node_annotations(name, {"hami.io/node-handshake": "now"}, rv)
            return node

    racing = RacingGateway(gateway.api_client)

    acquire_node_lock(
        racing, "gpu-node-3", NAMESPACE, "p", now=lambda: datetime(2026, 1, 1, tzinfo=UTC)
    )

    patches = sent(apiserver, "PATCH", "/api/v1/nodes/gpu-node-3")
    assert len(patches) == 3  # the other writer, our 409, our retry
    node = gateway.get_node("gpu-node-3")
    assert node is not None
    assert (
        node["metadata"]["annotations"]["hami.io/mutex.lock"]
        == "2026-01-01T00:00:00Z,tessera-workloads,p"
    )
    assert node["metadata"]["annotations"]["hami.io/node-handshake"] == "now"


def test_watch_resumes_from_resource_version_and_relists_after_410(apiserver, gateway):
    gateway.create(Kind.POD, NAMESPACE, build_pod(codespace(), config(), now=NOW))
    tracker = PodTracker(gateway, NAMESPACE, watch_timeout_seconds=1)
    first = tracker.refresh()
    listed_rv = tracker.resource_version

    patched = gateway.patch_pod_metadata(NAMESPACE, "cs-alice-7f3k", annotations={"x": "1"})
    second = tracker.refresh()
    resumed_rv = tracker.resource_version
    gateway.delete(Kind.POD, NAMESPACE, "cs-alice-7f3k")
    apiserver.call(apiserver.emulator.compact)  # the deletion event is compacted away: 410
    third = tracker.refresh()

    assert [(r.workload_id, r.phase) for r in first] == [(7, ObservedPhase.PENDING)]
    assert [(r.workload_id, r.phase) for r in second] == [(7, ObservedPhase.PENDING)]
    assert [(r.workload_id, r.phase) for r in third] == [(7, ObservedPhase.MISSING)]
    watches = apiserver.requests(lambda r: r.params.get("watch") == "True")
    # the second watch resumes from the last event of the first one
    assert resumed_rv == patched["metadata"]["resourceVersion"] != listed_rv
    assert [w.params["resourceVersion"] for w in watches] == [listed_rv, resumed_rv]
    assert watches[0].params["allowWatchBookmarks"] == "True"
    assert watches[0].params["timeoutSeconds"] == "1"
    assert watches[0].params["labelSelector"] == "app.kubernetes.io/managed-by=tessera"
    assert tracker.relists == 2


def test_watch_error_event_410_raises_watch_expired(apiserver, gateway):
    apiserver.call(apiserver.emulator._next_version)
    apiserver.call(apiserver.emulator.compact)  # versions below 2 are gone

    with pytest.raises(WatchExpired) as caught:
        list(gateway.watch_pods(NAMESPACE, "", "1", 1))

    assert caught.value.status == 410
    assert caught.value.permanent is False


@pytest.mark.parametrize(
    ("_case", "status", "permanent"),
    [("unavailable", 503, False), ("forbidden", 403, True), ("throttled", 429, False)],
)
def test_http_errors_are_classified(apiserver, gateway, _case, status, permanent):
    apiserver.call(
        lambda: (
            apiserver.emulator["get", "/api/v1/nodes"]
            << status
            << {"kind": "Status", "code": status, "message": f"injected {status}"}
        )
    )

    with pytest.raises(ClusterApiError) as caught:
        gateway.list_nodes()

    assert (caught.value.status, caught.value.permanent) == (status, permanent)
    assert f"injected {status}" in caught.value.message


def test_read_timeout_is_transient(apiserver):
    async def slow() -> dict:
        await asyncio.sleep(1.5)
        return {}

    apiserver.call(lambda: apiserver.emulator["post", POD_PATH] << slow)
    configuration = client.Configuration(host=apiserver.url)
    impatient = KubernetesGateway(
        client.ApiClient(configuration), connect_timeout=1, read_timeout=0.3
    )

    with pytest.raises(ClusterApiError) as caught:
        impatient.create(Kind.POD, NAMESPACE, {"metadata": {"name": "slow"}})

    assert (caught.value.status, caught.value.permanent) == (None, False)


def test_koordinator_devices_missing_crd_is_empty_and_present_crd_is_listed(apiserver, gateway):
    assert gateway.list_koordinator_devices() == []

    apiserver.add_object(
        "scheduling.koordinator.sh/v1alpha1/devices",
        None,
        {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Device",
            "metadata": {"name": "gpu-node-3"},
            "spec": {"devices": []},
        },
    )

    assert [d["metadata"]["name"] for d in gateway.list_koordinator_devices()] == ["gpu-node-3"]


def test_codespace_flow_through_the_real_client(apiserver, gateway):
    backend = KubernetesBackend(gateway, config(), clock=lambda: NOW)
    backend.tracker.watch_timeout_seconds = 1

    backend.materialize(codespace())
    backend.materialize(codespace())  # create-or-get: 409s answered with the existing objects
    # hami-scheduler binds and kubelet starts the pod: both are status writes on the server side
    gateway.bind_pod(NAMESPACE, "cs-alice-7f3k", "gpu-node-3")
    apiserver.call(
        lambda: apiserver.emulator.objects["v1/pods", NAMESPACE, "cs-alice-7f3k"].patch(
            {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        )
    )
    running = backend.sync_status([7])
    backend.release(7, "cs-alice-7f3k", delete_home=False)
    stopped = {
        kind: gateway.get(kind, NAMESPACE, name) is not None
        for kind, name in [
            (Kind.POD, "cs-alice-7f3k"),
            (Kind.PVC, "cs-alice-7f3k-home"),
            (Kind.SERVICE, "cs-alice-7f3k"),
        ]
    }
    backend.materialize(codespace())
    backend.release(7, "cs-alice-7f3k", delete_home=True)
    gone = [
        gateway.get(kind, NAMESPACE, name)
        for kind, name in [
            (Kind.POD, "cs-alice-7f3k"),
            (Kind.PVC, "cs-alice-7f3k-home"),
            (Kind.SERVICE, "cs-alice-7f3k"),
        ]
    ]

    assert running == [StatusReport(7, ObservedPhase.RUNNING, node_name="gpu-node-3")]
    assert stopped == {Kind.POD: False, Kind.PVC: True, Kind.SERVICE: False}
    assert gone == [None, None, None]
    inventory = backend.sync_inventory()
    assert [(n.name, [g.uuid for g in n.gpus]) for n in inventory] == [("gpu-node-3", [GPU_A])]
    assert json.loads(sent(apiserver, "POST", POD_PATH)[0].body)["kind"] == "Pod"


def test_from_settings_reads_a_kubeconfig_and_talks_to_the_cluster(
    apiserver, tmp_path, monkeypatch
):
    import django.conf

    from scheduling.backends.kubernetes import backend as backend_module

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": apiserver.url}}],
                "users": [{"name": "tessera", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "dev", "context": {"cluster": "kmock", "user": "tessera"}}],
                "current-context": "dev",
            }
        )
    )
    settings = type(
        "Settings",
        (),
        {
            "TESSERA_KUBECONFIG": str(kubeconfig),
            "TESSERA_KUBE_CONTEXT": "dev",
            "TESSERA_KUBE_MODE": "hami-bind",
        },
    )
    monkeypatch.setattr(django.conf, "settings", settings)

    backend = backend_module.from_settings()
    nodes = backend.sync_inventory()

    assert backend.config.mode == Mode.HAMI_BIND
    assert [n.name for n in nodes] == ["gpu-node-3"]
    (request,) = sent(apiserver, "GET", "/api/v1/nodes")
    assert request.headers["Authorization"] == "Bearer t0ken"


def test_missing_kubeconfig_is_a_permanent_error(tmp_path):
    from scheduling.backends.kubernetes.gateway import api_client_from_kubeconfig

    with pytest.raises(ClusterApiError) as caught:
        api_client_from_kubeconfig(str(tmp_path / "nope"))

    assert caught.value.permanent is True


def test_polite_reclaim_annotates_the_pod_with_its_deadline_and_reason_then_clears_it(
    apiserver, gateway
):
    backend = KubernetesBackend(gateway, config(), clock=lambda: NOW)
    backend.materialize(codespace())
    deadline = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)

    told = backend.signal_reclaim(
        7, "cs-alice-7f3k", deadline=deadline, reason="team-b needs its min back"
    )

    (patch,) = sent(apiserver, "PATCH", f"{POD_PATH}/cs-alice-7f3k")
    assert json.loads(patch.body)["metadata"]["annotations"] == {
        "tessera.io/reclaim-deadline": "2026-12-02T12:05:00Z",
        "tessera.io/reclaim-reason": "team-b needs its min back",
    }
    pod = gateway.get(Kind.POD, NAMESPACE, "cs-alice-7f3k")
    assert told is True
    assert pod is not None
    assert pod["metadata"]["annotations"]["tessera.io/reclaim-deadline"] == "2026-12-02T12:05:00Z"

    cleared = backend.signal_reclaim(7, "cs-alice-7f3k", deadline=None, reason="")
    pod = gateway.get(Kind.POD, NAMESPACE, "cs-alice-7f3k")
    assert cleared is True
    assert pod is not None
    assert "tessera.io/reclaim-deadline" not in pod["metadata"]["annotations"]
    # a pod the cluster does not have (or not Tessera's) is left alone
    assert backend.signal_reclaim(8, "cs-other", deadline=deadline, reason="x") is False
