"""KubernetesBackend against the fake cluster: the codespace flow, idempotency, errors, hami-bind
node lock and binding, settings."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from k8s_builders import GPU_A, NAMESPACE, NOW, codespace, config, gang_pod, hami_register_json

from scheduling.backends.base import BackendObject, ObservedPhase, StatusReport
from scheduling.backends.kubernetes import backend as backend_module
from scheduling.backends.kubernetes.backend import KubernetesBackend, config_from_settings
from scheduling.backends.kubernetes.binding import (
    NodeLockBusy,
    acquire_node_lock,
    release_node_lock,
)
from scheduling.backends.kubernetes.constants import Mode
from scheduling.backends.kubernetes.fake import FakeCluster
from scheduling.backends.kubernetes.interface import ClusterApiError, Kind

LOCK = "hami.io/mutex.lock"


def make(mode: Mode = Mode.HAMI_DELEGATE, **fake: bool) -> tuple[KubernetesBackend, FakeCluster]:
    cluster = FakeCluster(**fake)
    cluster.add_node(
        "gpu-node-3", annotations={"hami.io/node-nvidia-register": hami_register_json(GPU_A)}
    )
    return KubernetesBackend(cluster, config(mode), clock=lambda: NOW), cluster


def objects(cluster: FakeCluster) -> dict[str, list[str]]:
    return {kind.name: cluster.objects(kind, NAMESPACE) for kind in Kind}


def run_pod(cluster: FakeCluster, name: str) -> None:
    cluster.set_pod_status(
        NAMESPACE, name, "Running", conditions=[{"type": "Ready", "status": "True"}]
    )


def test_codespace_flow_create_running_stop_start_delete():
    backend, cluster = make()
    request = codespace()

    # create
    backend.materialize(request)
    assert objects(cluster) == {
        "POD": ["cs-alice-7f3k"],
        "PVC": ["cs-alice-7f3k-home"],
        "SERVICE": ["cs-alice-7f3k"],
    }
    assert backend.sync_status([7]) == [StatusReport(7, ObservedPhase.PENDING)]

    # running (hami-scheduler binds, kubelet starts it)
    cluster.bind_pod(NAMESPACE, "cs-alice-7f3k", "gpu-node-3")
    run_pod(cluster, "cs-alice-7f3k")
    assert backend.sync_status([7]) == [
        StatusReport(7, ObservedPhase.RUNNING, node_name="gpu-node-3")
    ]

    # stop: pod and service go, the home stays
    backend.release(7, "cs-alice-7f3k", delete_home=False)
    assert objects(cluster) == {"POD": [], "PVC": ["cs-alice-7f3k-home"], "SERVICE": []}
    assert backend.sync_status([7]) == [
        StatusReport(7, ObservedPhase.MISSING, "no pod in the cluster")
    ]

    # start again: the same PVC is reused
    backend.materialize(request)
    assert objects(cluster)["POD"] == ["cs-alice-7f3k"]
    assert backend.sync_status([7])[0].phase == ObservedPhase.PENDING

    # delete: everything goes
    backend.release(7, "cs-alice-7f3k", delete_home=True)
    assert objects(cluster) == {"POD": [], "PVC": [], "SERVICE": []}


def test_materialize_twice_is_create_or_get():
    backend, cluster = make()

    backend.materialize(codespace())
    before = cluster.get(Kind.POD, NAMESPACE, "cs-alice-7f3k")
    backend.materialize(codespace())

    assert cluster.get(Kind.POD, NAMESPACE, "cs-alice-7f3k") == before
    assert cluster.calls.count("create") == 6


def test_name_taken_by_another_workload_is_permanent():
    backend, cluster = make()
    backend.materialize(codespace())

    with pytest.raises(ClusterApiError) as caught:
        backend.materialize(codespace(workload_id=8))

    assert caught.value.permanent is True
    assert "another workload" in caught.value.message


def test_release_twice_and_release_of_unknown_are_fine():
    backend, cluster = make()
    backend.materialize(codespace())

    backend.release(7, "cs-alice-7f3k", delete_home=True)
    backend.release(7, "cs-alice-7f3k", delete_home=True)
    backend.release(99, "never-created", delete_home=True)

    assert objects(cluster) == {"POD": [], "PVC": [], "SERVICE": []}


def test_release_leaves_objects_of_another_workload_alone():
    backend, cluster = make()
    backend.materialize(codespace())

    backend.release(8, "cs-alice-7f3k", delete_home=True)

    assert objects(cluster)["POD"] == ["cs-alice-7f3k"]


@pytest.mark.parametrize(
    ("_case", "operation", "status", "permanent"),
    [
        ("apiserver-down", "create", 503, False),
        ("timeout", "create", None, False),
        ("throttled", "create", 429, False),
        ("rbac", "create", 403, True),
        ("invalid", "create", 422, True),
    ],
)
def test_materialize_errors_are_classified(_case, operation, status, permanent):
    backend, cluster = make()
    cluster.fail_next(operation, status)

    with pytest.raises(ClusterApiError) as caught:
        backend.materialize(codespace())

    assert (caught.value.status, caught.value.permanent) == (status, permanent)


def test_retry_after_a_transient_failure_completes_the_codespace():
    backend, cluster = make()
    cluster.fail_next("create", 500)
    with pytest.raises(ClusterApiError):
        backend.materialize(codespace())

    backend.materialize(codespace())

    assert objects(cluster) == {
        "POD": ["cs-alice-7f3k"],
        "PVC": ["cs-alice-7f3k-home"],
        "SERVICE": ["cs-alice-7f3k"],
    }


def test_terminating_pod_from_previous_run_is_transient():
    backend, cluster = make()
    backend.materialize(codespace())
    pod = cluster._objects[(Kind.POD, NAMESPACE, "cs-alice-7f3k")]
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"

    with pytest.raises(ClusterApiError) as caught:
        backend.materialize(codespace())

    assert caught.value.permanent is False
    assert "still terminating" in caught.value.message


def test_gang_job_pods_get_no_pvc_or_service_and_report_per_workload():
    backend, cluster = make(Mode.KOORDINATOR, auto_start=True)

    backend.materialize(gang_pod(0))
    backend.materialize(gang_pod(1))

    assert objects(cluster) == {
        "POD": ["job-train-12-pod-0", "job-train-12-pod-1"],
        "PVC": [],
        "SERVICE": [],
    }
    assert backend.sync_status([100, 101, 102]) == [
        StatusReport(100, ObservedPhase.RUNNING, node_name="gpu-node-0"),
        StatusReport(101, ObservedPhase.RUNNING, node_name="gpu-node-1"),
        StatusReport(102, ObservedPhase.MISSING, "no pod in the cluster"),
    ]


# --- hami-bind: node lock and binding -------------------------------------------------------


def test_hami_bind_takes_lock_and_binds():
    backend, cluster = make(Mode.HAMI_BIND)

    backend.materialize(codespace())

    pod = cluster.get(Kind.POD, NAMESPACE, "cs-alice-7f3k")
    node = cluster.get_node("gpu-node-3")
    assert pod is not None
    assert node is not None
    assert pod["spec"]["nodeName"] == "gpu-node-3"
    assert node["metadata"]["annotations"][LOCK].endswith(f",{NAMESPACE},cs-alice-7f3k")
    assert cluster.calls.count("bind_pod") == 1


def test_hami_bind_is_idempotent_when_already_bound():
    backend, cluster = make(Mode.HAMI_BIND)
    backend.materialize(codespace())

    backend.materialize(codespace())

    assert cluster.calls.count("bind_pod") == 1


def test_hami_bind_retries_node_lock_on_resource_version_conflict():
    backend, cluster = make(Mode.HAMI_BIND)
    cluster.fail_next("cas_patch_node_annotations", 409, times=2)

    backend.materialize(codespace())

    assert cluster.calls.count("cas_patch_node_annotations") == 3
    node = cluster.get_node("gpu-node-3")
    assert node is not None
    assert LOCK in node["metadata"]["annotations"]


def test_lock_gives_up_after_repeated_conflicts_with_a_transient_error():
    cluster = FakeCluster()
    cluster.add_node("n1")
    cluster.fail_next("cas_patch_node_annotations", 409, times=5)

    with pytest.raises(ClusterApiError) as caught:
        acquire_node_lock(cluster, "n1", NAMESPACE, "p", now=lambda: datetime.now(UTC))

    assert (caught.value.status, caught.value.permanent) == (409, False)


def test_live_unexpired_lock_of_another_pod_is_busy():
    backend, cluster = make(Mode.HAMI_BIND)
    cluster.create(Kind.POD, NAMESPACE, {"metadata": {"name": "other"}})
    taken = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.set_node_annotation("gpu-node-3", LOCK, f"{taken},{NAMESPACE},other")

    with pytest.raises(NodeLockBusy) as caught:
        backend.materialize(codespace())

    assert caught.value.permanent is False
    pod = cluster.get(Kind.POD, NAMESPACE, "cs-alice-7f3k")
    assert pod is not None
    assert "nodeName" not in pod["spec"]


@pytest.mark.parametrize(
    ("_case", "lock_time", "owner_exists"),
    [("expired", "2020-01-01T00:00:00Z", True), ("dead-owner", None, False)],
)
def test_stale_lock_is_taken_over(_case, lock_time, owner_exists):
    backend, cluster = make(Mode.HAMI_BIND)
    if owner_exists:
        cluster.create(Kind.POD, NAMESPACE, {"metadata": {"name": "other"}})
    stamp = lock_time or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.set_node_annotation("gpu-node-3", LOCK, f"{stamp},{NAMESPACE},other")

    backend.materialize(codespace())

    node = cluster.get_node("gpu-node-3")
    assert node is not None
    assert node["metadata"]["annotations"][LOCK].endswith(",cs-alice-7f3k")


def test_release_before_allocate_removes_our_node_lock_only():
    backend, cluster = make(Mode.HAMI_BIND)
    backend.materialize(codespace())

    backend.release(7, "cs-alice-7f3k", delete_home=False)

    node = cluster.get_node("gpu-node-3")
    assert node is not None
    assert LOCK not in node["metadata"]["annotations"]
    cluster.set_node_annotation("gpu-node-3", LOCK, f"2026-01-01T00:00:00Z,{NAMESPACE},other")
    assert release_node_lock(cluster, "gpu-node-3", NAMESPACE, "cs-alice-7f3k") is False


def test_binding_to_missing_node_is_permanent_and_leaves_pod_unbound():
    backend, cluster = make(Mode.HAMI_BIND)

    with pytest.raises(ClusterApiError) as caught:
        backend.materialize(codespace(node_name="gone-node"))

    assert (caught.value.status, caught.value.permanent) == (404, True)


def test_leftover_pod_on_another_node_is_replaced_on_retry():
    backend, cluster = make(Mode.HAMI_BIND)
    cluster.add_node("gpu-node-9")
    backend.materialize(codespace(node_name="gpu-node-9"))

    with pytest.raises(ClusterApiError) as caught:
        backend.materialize(codespace())
    backend.materialize(codespace())

    assert caught.value.permanent is False
    assert "placed on gpu-node-9, not gpu-node-3" in caught.value.message
    pod = cluster.get(Kind.POD, NAMESPACE, "cs-alice-7f3k")
    assert pod is not None
    assert pod["spec"]["nodeName"] == "gpu-node-3"


def test_binding_race_lost_to_another_node_is_permanent():
    backend, cluster = make(Mode.HAMI_BIND)
    real_bind = cluster.bind_pod

    def racing_bind(namespace: str, name: str, node_name: str) -> None:
        real_bind(namespace, name, "gpu-node-9")  # someone else bound it first
        real_bind(namespace, name, node_name)  # ours answers 409

    cluster.bind_pod = racing_bind  # type: ignore[method-assign]

    with pytest.raises(ClusterApiError) as caught:
        backend.materialize(codespace())

    assert caught.value.permanent is True
    assert "bound to gpu-node-9, not gpu-node-3" in caught.value.message


def test_failed_binding_releases_the_lock():
    backend, cluster = make(Mode.HAMI_BIND)
    cluster.fail_next("bind_pod", 500)

    with pytest.raises(ClusterApiError):
        backend.materialize(codespace())

    node = cluster.get_node("gpu-node-3")
    assert node is not None
    assert LOCK not in node["metadata"]["annotations"]


# --- reconciliation and settings ------------------------------------------------------------


def test_list_objects_names_each_pod_with_its_workload_and_placement():
    backend, _cluster = make(auto_start=True)
    backend.materialize(dataclasses.replace(codespace(), placement_id=41))
    backend.materialize(gang_pod(0))

    assert backend.list_objects() == [
        BackendObject("cs-alice-7f3k", 7, 41),
        BackendObject("job-train-12-pod-0", 100, None),
    ]


def test_a_release_keyed_by_an_earlier_placement_keeps_the_pod_and_service_of_the_next():
    # given a codespace's pod and Service made for its second placement
    backend, cluster = make(auto_start=True)
    backend.materialize(dataclasses.replace(codespace(), placement_id=42))
    # when the first placement's release arrives late
    backend.release(7, "cs-alice-7f3k", delete_home=False, placement_id=41)
    # then nothing of the second placement is touched
    assert objects(cluster) == {
        "POD": ["cs-alice-7f3k"],
        "PVC": ["cs-alice-7f3k-home"],
        "SERVICE": ["cs-alice-7f3k"],
    }
    # and its own release removes them
    backend.release(7, "cs-alice-7f3k", delete_home=False, placement_id=42)
    assert objects(cluster) == {"POD": [], "PVC": ["cs-alice-7f3k-home"], "SERVICE": []}


def test_materialize_replaces_a_pod_left_by_an_earlier_placement_on_the_same_node():
    backend, cluster = make(auto_start=True)
    backend.materialize(dataclasses.replace(codespace(), placement_id=41))

    with pytest.raises(ClusterApiError) as excinfo:
        backend.materialize(dataclasses.replace(codespace(), placement_id=42))
    assert excinfo.value.permanent is False
    backend.materialize(dataclasses.replace(codespace(), placement_id=42))

    assert backend.list_objects() == [BackendObject("cs-alice-7f3k", 7, 42)]


def test_config_from_settings_reads_every_name_with_defaults():
    everything = SimpleNamespace(
        TESSERA_KUBECONFIG="/etc/kube/config",
        TESSERA_KUBE_CONTEXT="dev",
        TESSERA_KUBE_NAMESPACE="gpu-work",
        TESSERA_KUBE_MODE="koordinator",
        TESSERA_CODESPACE_IMAGE_PULL_POLICY="Always",
        TESSERA_CODESPACE_PORT=22,
        TESSERA_KUBE_STORAGE_CLASS="fast",
        TESSERA_KUBE_RUNTIME_CLASS="nvidia",
    )

    loaded = config_from_settings(everything)

    assert dataclasses.asdict(loaded) | {"mode": loaded.mode.value} == dataclasses.asdict(
        config_from_settings(SimpleNamespace())
    ) | {
        "kubeconfig": "/etc/kube/config",
        "context": "dev",
        "namespace": "gpu-work",
        "mode": "koordinator",
        "image_pull_policy": "Always",
        "codespace_port": 22,
        "storage_class": "fast",
        "runtime_class": "nvidia",
    }
    assert config_from_settings(SimpleNamespace()).mode == Mode.HAMI_DELEGATE


def test_bad_mode_setting_is_rejected():
    with pytest.raises(ValueError, match="unknown Kubernetes mode"):
        config_from_settings(SimpleNamespace(TESSERA_KUBE_MODE="volcano"))


def test_from_settings_with_fake_cluster_runs_a_demo_codespace(monkeypatch):
    import django.conf

    monkeypatch.setattr(
        django.conf,
        "settings",
        SimpleNamespace(TESSERA_KUBE_FAKE=True, TESSERA_KUBE_NAMESPACE=NAMESPACE),
    )
    backend_module._demo_cluster.cache_clear()
    backend = backend_module.from_settings()
    nodes = backend.sync_inventory()
    gpu = nodes[0].gpus[0]
    request = dataclasses.replace(
        codespace(),
        node_name=nodes[0].name,
        gpus=(dataclasses.replace(codespace().gpus[0], uuid=gpu.uuid, index=gpu.index),),
    )

    backend.materialize(request)

    assert backend.name == "kubernetes"
    assert [n.name for n in nodes] == ["demo-gpu-0", "demo-gpu-1"]
    assert backend.sync_status([7]) == [
        StatusReport(7, ObservedPhase.RUNNING, node_name="demo-gpu-0")
    ]
    assert backend_module.from_settings().gateway is backend.gateway
    backend_module._demo_cluster.cache_clear()


def test_signal_reclaim_leaves_a_pod_of_a_later_placement_alone():
    backend, cluster = make()
    backend.materialize(dataclasses.replace(codespace(), placement_id=2))
    deadline = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)

    stale = backend.signal_reclaim(
        7, "cs-alice-7f3k", deadline=deadline, reason="r", placement_id=1
    )
    current = backend.signal_reclaim(
        7, "cs-alice-7f3k", deadline=deadline, reason="r", placement_id=2
    )

    pod = cluster.get(Kind.POD, NAMESPACE, "cs-alice-7f3k")
    assert (stale, current) == (False, True)
    assert pod is not None
    assert pod["metadata"]["annotations"]["tessera.io/reclaim-deadline"] == "2026-12-02T12:05:00Z"
