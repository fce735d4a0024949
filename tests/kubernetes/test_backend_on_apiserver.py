"""The Kubernetes backend against a real kube-apiserver with KWOK nodes (no database).

What kmock cannot tell: that the API server's validation and admission accept the objects Tessera
sends in every mode, that bindings, resourceVersions, compare-and-swap conflicts and watch resume
behave, that a compacted etcd makes the watch relist, and that inventory comes from real Node
objects carrying HAMi's registration annotation and GPU Feature Discovery labels.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from scheduling.backends.base import ObservedPhase
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.gateway import KubernetesGateway
from scheduling.backends.kubernetes.interface import ClusterApiError, Kind
from scheduling.tests.kubernetes.k8s_builders import GPU_A, codespace, config, hami_register_json
from tests.kubernetes.cluster import (
    create_node,
    get_pod,
    kwok_node,
    node_ready,
    play_hami_scheduler,
    play_koord_scheduler,
    pod_phase,
    wait_for,
)
from tests.kubernetes.stack import KubeStack

pytestmark = pytest.mark.kubernetes


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def gpu_node(stack: KubeStack, *uuids: str, labels: dict[str, str] | None = None) -> str:
    """A KWOK node whose GPUs HAMi registered (JSON format, v2.8+); waits until it is Ready."""
    name = unique("gpu")
    create_node(
        stack,
        kwok_node(
            name,
            labels=labels,
            annotations={c.HAMI_NODE_REGISTER: hami_register_json(*uuids)},
        ),
    )
    wait_for(f"node {name} Ready", lambda: node_ready(stack, name))
    return name


def backend_for(gateway: KubernetesGateway, namespace: str, mode: c.Mode) -> KubernetesBackend:
    return KubernetesBackend(gateway, dataclasses.replace(config(mode), namespace=namespace))


def report(backend: KubernetesBackend, workload_id: int) -> Any:
    return backend.sync_status([workload_id])[0]


def wait_phase(backend: KubernetesBackend, workload_id: int, phase: ObservedPhase) -> Any:
    """Sync status (list, then resume the watch) until the workload reports `phase`."""
    return wait_for(
        f"workload {workload_id} {phase}",
        lambda: r if (r := report(backend, workload_id)).phase == phase else None,
    )


def test_inventory_from_kwok_nodes_with_hami_registration_and_gfd_labels(
    kube_stack: KubeStack, admin_gateway: KubernetesGateway
) -> None:
    # given a node whose GPUs HAMi registered and a node that only GPU Feature Discovery labelled
    hami = gpu_node(kube_stack, "GPU-aaaa-0", "GPU-aaaa-1", labels={"pool": "gpu"})
    gfd = unique("gfd")
    create_node(
        kube_stack,
        kwok_node(
            gfd,
            labels={
                c.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB",
                c.GFD_COUNT: "4",
                c.GFD_MEMORY: "81920",
                "pool": "gpu",
            },
            cpu="32",
            memory="256Gi",
        ),
    )
    wait_for(f"node {gfd} Ready", lambda: node_ready(kube_stack, gfd))
    backend = backend_for(admin_gateway, "default", c.Mode.HAMI_DELEGATE)
    # when the backend reads the inventory from the API server
    nodes = {n.name: n for n in backend.sync_inventory()}
    # then both nodes are there with their GPUs, healthy because KWOK made the nodes Ready
    assert [(g.uuid, g.memory_mib, g.healthy) for g in nodes[hami].gpus] == [
        ("GPU-aaaa-0", 81920, True),
        ("GPU-aaaa-1", 81920, True),
    ]
    assert (nodes[hami].cpu_milli, nodes[hami].memory_mib) == (64000, 512 * 1024)
    assert [(g.uuid, g.model, g.memory_mib) for g in nodes[gfd].gpus] == [
        (f"gfd:{gfd}:{i}", "NVIDIA-A100-SXM4-80GB", 81920) for i in range(4)
    ]
    assert ("pool", "gpu") in nodes[gfd].labels


@pytest.mark.parametrize("mode", c.DEVICE_PLUGIN_MODES)
def test_codespace_objects_are_accepted_bound_and_run_in_every_mode(
    kube_stack: KubeStack, admin_gateway: KubernetesGateway, namespace: str, mode: c.Mode
) -> None:
    node = gpu_node(kube_stack, GPU_A)
    backend = backend_for(admin_gateway, namespace, mode)
    request = codespace(name=unique("cs"), node_name=node, home_name="")
    # when Tessera materializes the codespace: the real API server admits Pod, PVC and Service
    backend.materialize(request)
    pod = get_pod(kube_stack, namespace, request.name)
    assert pod is not None
    assert admin_gateway.get(Kind.SERVICE, namespace, request.name) is not None
    pvc = admin_gateway.get(Kind.PVC, namespace, f"{request.name}{c.HOME_VOLUME_SUFFIX}")
    assert pvc is not None
    assert pvc["spec"]["resources"]["requests"]["storage"] == "20Gi"
    if mode != c.Mode.HAMI_BIND:  # waiting for the scheduler Tessera delegates to
        assert report(backend, request.workload_id).phase == ObservedPhase.PENDING
    # and the scheduler of the mode binds it (Tessera itself in hami-bind)
    if mode == c.Mode.HAMI_DELEGATE:
        assert pod["spec"]["schedulerName"] == "hami-scheduler"
        play_hami_scheduler(kube_stack, namespace, request.name, node)
    elif mode == c.Mode.KOORDINATOR:
        assert pod["spec"]["schedulerName"] == "koord-scheduler"
        play_koord_scheduler(kube_stack, namespace, request.name)
    else:
        assert pod["spec"]["nodeName"] == node  # pods/binding by Tessera after the node lock
    # then KWOK runs it on the node and the status sync sees it Running through the watch
    running = wait_phase(backend, request.workload_id, ObservedPhase.RUNNING)
    assert running.phase == ObservedPhase.RUNNING
    assert get_pod(kube_stack, namespace, request.name)["spec"]["nodeName"] == node  # type: ignore[index]
    # materialize again (a retried task) is create-or-get: nothing changes
    before = get_pod(kube_stack, namespace, request.name)["metadata"]["resourceVersion"]  # type: ignore[index]
    backend.materialize(request)
    assert get_pod(kube_stack, namespace, request.name)["metadata"]["resourceVersion"] == before  # type: ignore[index]
    # stop: pod and Service go, the home stays
    backend.release(request.workload_id, request.name, delete_home=False)
    wait_for("pod gone", lambda: get_pod(kube_stack, namespace, request.name) is None)
    assert admin_gateway.get(Kind.SERVICE, namespace, request.name) is None
    assert admin_gateway.get(Kind.PVC, namespace, f"{request.name}{c.HOME_VOLUME_SUFFIX}")
    assert wait_phase(backend, request.workload_id, ObservedPhase.MISSING)
    # start again on the same node, then delete with the home
    backend.materialize(request)
    if mode == c.Mode.HAMI_DELEGATE:
        play_hami_scheduler(kube_stack, namespace, request.name, node)
    elif mode == c.Mode.KOORDINATOR:
        play_koord_scheduler(kube_stack, namespace, request.name)
    wait_phase(backend, request.workload_id, ObservedPhase.RUNNING)
    backend.release(request.workload_id, request.name, delete_home=True)
    wait_for("pod gone", lambda: get_pod(kube_stack, namespace, request.name) is None)
    home = admin_gateway.get(Kind.PVC, namespace, f"{request.name}{c.HOME_VOLUME_SUFFIX}")
    # the claim is deleted; its pvc-protection finalizer is the controller-manager's to remove
    assert home is None or home["metadata"].get("deletionTimestamp")


def test_watch_resumes_from_its_resource_version_and_relists_after_etcd_compaction(
    kube_stack: KubeStack, admin_gateway: KubernetesGateway, namespace: str
) -> None:
    node = gpu_node(kube_stack, GPU_A)
    backend = backend_for(admin_gateway, namespace, c.Mode.HAMI_DELEGATE)
    first = codespace(name=unique("cs"), node_name=node, workload_id=11)
    backend.materialize(first)
    assert report(backend, 11).phase == ObservedPhase.PENDING  # the first sync lists
    assert backend.tracker.relists == 1
    listed_at = backend.tracker.resource_version
    # when the pod runs, the next syncs resume the watch (no relist) and see it
    play_hami_scheduler(kube_stack, namespace, first.name, node)
    wait_phase(backend, 11, ObservedPhase.RUNNING)
    assert backend.tracker.relists == 1
    assert int(backend.tracker.resource_version) > int(listed_at)
    # given the watch's resourceVersion is compacted away while Tessera was not looking
    second = codespace(name=unique("cs"), node_name=node, workload_id=12)
    backend.materialize(second)
    stale = backend.tracker.resource_version
    kube_stack.compact_etcd()
    # when the status sync resumes: 410 Gone, it relists, and still sees both pods
    reports = backend.sync_status([11, 12])
    assert backend.tracker.relists == 2
    assert int(backend.tracker.resource_version) > int(stale)
    assert [r.phase for r in reports] == [ObservedPhase.RUNNING, ObservedPhase.PENDING]


def test_stale_resource_version_is_a_conflict_and_the_node_lock_retries(
    kube_stack: KubeStack, admin_gateway: KubernetesGateway
) -> None:
    node = gpu_node(kube_stack, GPU_A)
    seen = admin_gateway.get_node(node)
    assert seen is not None
    stale = seen["metadata"]["resourceVersion"]
    # someone else writes the node after we read it
    admin_gateway.cas_patch_node_annotations(node, {"example.com/touched": "1"}, stale)
    # a compare-and-swap with the version we read is refused with 409, a transient error
    with pytest.raises(ClusterApiError) as refused:
        admin_gateway.cas_patch_node_annotations(node, {c.HAMI_NODE_LOCK: "x"}, stale)
    assert refused.value.is_conflict
    assert refused.value.permanent is False
    assert c.HAMI_NODE_LOCK not in (admin_gateway.get_node(node) or {})["metadata"]["annotations"]


def test_creating_an_existing_pod_is_a_conflict_the_backend_resolves(
    kube_stack: KubeStack, admin_gateway: KubernetesGateway, namespace: str
) -> None:
    node = gpu_node(kube_stack, GPU_A)
    backend = backend_for(admin_gateway, namespace, c.Mode.KOORDINATOR)
    request = codespace(name=unique("cs"), node_name=node, workload_id=21)
    backend.materialize(request)
    pod = admin_gateway.get(Kind.POD, namespace, request.name)
    assert pod is not None
    with pytest.raises(ClusterApiError) as duplicate:
        admin_gateway.create(Kind.POD, namespace, pod | {"metadata": {"name": request.name}})
    assert duplicate.value.is_conflict
    # a different workload asking for the same name is refused for good
    with pytest.raises(ClusterApiError) as taken:
        backend.materialize(dataclasses.replace(request, workload_id=22))
    assert taken.value.permanent is True


def test_pod_deleted_behind_tesseras_back_reports_missing(
    kube_stack: KubeStack, admin_gateway: KubernetesGateway, namespace: str
) -> None:
    node = gpu_node(kube_stack, GPU_A)
    backend = backend_for(admin_gateway, namespace, c.Mode.KOORDINATOR)
    request = codespace(name=unique("cs"), node_name=node, workload_id=31)
    backend.materialize(request)
    play_koord_scheduler(kube_stack, namespace, request.name)
    wait_phase(backend, 31, ObservedPhase.RUNNING)
    # kubectl delete pod: graceful deletion, KWOK (the node) finishes it
    status, _ = kube_stack.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{request.name}")
    assert status == 200
    wait_for("pod gone", lambda: not pod_phase(kube_stack, namespace, request.name))
    # the watch delivers the DELETED event: MISSING, and list_objects no longer has it
    assert wait_phase(backend, 31, ObservedPhase.MISSING)
    assert request.name not in [o.name for o in backend.list_objects()]
