"""The chart's ServiceAccount and least-privilege RBAC on a real API server with RBAC on.

The chart's RBAC (helm template, per mode) and the plain manifests (deploy/manifests/20-rbac.yaml
and optional/) are applied for real; the backend then runs its whole codespace lifecycle with a
token of that ServiceAccount (TokenRequest API), and the API server's own SubjectAccessReview says
the ServiceAccount may do exactly what the backend needs over a matrix of verbs and resources.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduling.backends.base import GpuBinding, ObservedPhase
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.interface import ClusterApiError, Kind
from scheduling.tests.kubernetes.k8s_builders import GPU_A, codespace, config
from tests.kubernetes import dra
from tests.kubernetes.chart import Discovery, render
from tests.kubernetes.cluster import (
    apply,
    bind,
    get_pod,
    play_hami_scheduler,
    play_koord_scheduler,
    wait_for,
)
from tests.kubernetes.conftest import create_namespace, gateway_for
from tests.kubernetes.stack import ROOT, KubeStack
from tests.kubernetes.test_backend_on_apiserver import gpu_node

pytestmark = pytest.mark.kubernetes

DRIVER = "gpu.nvidia.com"  # the driver dra mode's default configuration pins devices of

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
NAMESPACED = (
    "pods",
    "pods/binding",
    "pods/exec",
    "pods/log",
    "persistentvolumeclaims",
    "services",
    "secrets",
    "configmaps",
    "serviceaccounts",
)
CLUSTER = ("nodes", "namespaces", "persistentvolumes")
# What the backend calls, per mode (scheduling/backends/kubernetes/gateway.py).
NEEDED_IN_WORKLOADS = {
    ("pods", v) for v in ("get", "list", "watch", "create", "patch", "delete")
} | {
    (r, v)
    for r in ("persistentvolumeclaims", "services")
    for v in ("get", "list", "create", "delete")
}
NEEDED_CLUSTER = {("nodes", v) for v in ("get", "list", "watch")}
KOORD_DEVICES = {("devices", v) for v in ("get", "list", "watch")}
# resource.k8s.io, asked about next to the core resources: claims in a namespace, slices cluster-wide
DRA_NAMESPACED = ("resourceclaims",)
DRA_CLUSTER = ("resourceslices",)


def needed(mode: c.Mode) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    workloads, cluster = set(NEEDED_IN_WORKLOADS), set(NEEDED_CLUSTER)
    if mode == c.Mode.HAMI_BIND:
        workloads.add(("pods/binding", "create"))
        cluster.add(("nodes", "patch"))
    if mode == c.Mode.DRA:
        workloads |= {("resourceclaims", v) for v in ("get", "list", "create", "delete")}
        cluster |= {("resourceslices", v) for v in ("get", "list")}
    return workloads, cluster


def install(stack: KubeStack, objects: list[dict[str, Any]], namespace: str) -> None:
    """Server-side apply each object for real (namespaces first)."""
    discovery = Discovery(stack)
    for obj in sorted(objects, key=lambda o: o["kind"] != "Namespace"):
        status, body = apply(
            stack, discovery.path(obj, namespace), yaml.safe_dump(obj), dry_run=False
        )
        assert status in (200, 201), body


def service_account_token(stack: KubeStack, namespace: str, name: str) -> str:
    status, body = stack.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    assert status == 201, body
    return str(body["status"]["token"])


def allowed(
    stack: KubeStack, user: str, verb: str, resource: str, namespace: str = "", group: str = ""
) -> bool:
    """The API server's answer to "may this ServiceAccount do that?" (SubjectAccessReview)."""
    plural, _, sub = resource.partition("/")
    sa_namespace = user.split(":")[2]
    attributes = {"verb": verb, "resource": plural, "subresource": sub, "group": group}
    if namespace:
        attributes["namespace"] = namespace
    status, body = stack.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{sa_namespace}",
                    "system:authenticated",
                ],
                "resourceAttributes": attributes,
            },
        },
    )
    assert status == 201, body
    return bool(body["status"].get("allowed"))


def permissions(
    stack: KubeStack, user: str, workloads: str, elsewhere: str
) -> dict[str, set[tuple[str, str]]]:
    """What the ServiceAccount may do, over the matrix, in its workloads namespace, in another
    namespace and cluster-wide."""
    namespaced = [(r, "") for r in NAMESPACED] + [(r, "resource.k8s.io") for r in DRA_NAMESPACED]
    cluster = [(r, "") for r in CLUSTER] + [(r, "resource.k8s.io") for r in DRA_CLUSTER]
    return {
        "workloads": {
            (r, v)
            for (r, g), v in itertools.product(namespaced, VERBS)
            if allowed(stack, user, v, r, workloads, group=g)
        },
        "elsewhere": {
            (r, v)
            for (r, g), v in itertools.product(namespaced, VERBS)
            if allowed(stack, user, v, r, elsewhere, group=g)
        },
        "cluster": {
            (r, v)
            for (r, g), v in itertools.product(cluster, VERBS)
            if allowed(stack, user, v, r, group=g)
        },
        "koordinator": {
            ("devices", v)
            for v in VERBS
            if allowed(stack, user, v, "devices", group=c.KOORD_DEVICE_GROUP)
        },
    }


@pytest.mark.parametrize("mode", list(c.Mode))
def test_chart_service_account_may_do_exactly_what_the_backend_needs(
    kube_stack: KubeStack, kube_bin: Path, mode: c.Mode
) -> None:
    release = f"tessera-{uuid.uuid4().hex[:6]}"  # cluster-scoped names are per release
    release_ns, workloads, elsewhere = f"{release}-sys", f"{release}-wl", f"{release}-other"
    for name in (release_ns, elsewhere):
        create_namespace(kube_stack, name)
    objects = render(
        kube_bin,
        release=release,
        namespace=release_ns,
        sets=[f"kubernetes.mode={mode.value}", f"kubernetes.managedNamespaces={{{workloads}}}"],
    )
    rbac = [
        o
        for o in objects
        if o["kind"]
        in {
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        }
    ]
    install(kube_stack, rbac, release_ns)
    create_namespace(kube_stack, workloads)  # its default ServiceAccount (no controller-manager)
    user = f"system:serviceaccount:{release_ns}:{release}"
    workloads_needed, cluster_needed = needed(mode)
    assert permissions(kube_stack, user, workloads, elsewhere) == {
        "workloads": workloads_needed,
        "elsewhere": set(),
        "cluster": cluster_needed,
        "koordinator": KOORD_DEVICES if mode == c.Mode.KOORDINATOR else set(),
    }

    # the backend, with that ServiceAccount's token, runs a codespace's whole lifecycle
    token = service_account_token(kube_stack, release_ns, release)
    gateway = gateway_for(str(kube_stack.kubeconfig_for_token(token, user)))
    backend = KubernetesBackend(gateway, dataclasses.replace(config(mode), namespace=workloads))
    node = gpu_node(kube_stack, GPU_A)
    request = codespace(name=f"cs-{uuid.uuid4().hex[:6]}", node_name=node, workload_id=41)
    if mode == c.Mode.DRA:  # the driver publishes the card; dra mode places whole cards or MIG
        published = dra.resource_slice(
            node, [(GPU_A, "NVIDIA-A100-SXM4-80GB", 81920)], driver=DRIVER
        )
        status, body = kube_stack.request("POST", f"{dra.API}/resourceslices", published)
        assert status == 201, body
        request = dataclasses.replace(request, gpus=(GpuBinding(0, GPU_A, 1000, 81920),))
    inventory = {n.name: n for n in backend.sync_inventory()}
    assert [g.uuid for g in inventory[node].gpus] == [GPU_A]
    backend.materialize(request)
    if mode == c.Mode.HAMI_DELEGATE:
        play_hami_scheduler(kube_stack, workloads, request.name, node)
    elif mode == c.Mode.KOORDINATOR:
        play_koord_scheduler(kube_stack, workloads, request.name)
    elif mode == c.Mode.DRA:  # the scheduler allocates the pinned card and binds the pod
        allocated = dra.allocation(node, "gpu-0", driver=DRIVER)
        allocated["status"]["allocation"]["devices"]["results"][0]["request"] = "gpu-0"
        status, body = kube_stack.request(
            "PATCH",
            f"{dra.API}/namespaces/{workloads}/resourceclaims/{request.name}-gpu/status",
            allocated,
            content_type="application/merge-patch+json",
        )
        assert status == 200, body
        bind(kube_stack, workloads, request.name, node)
    wait_for("running", lambda: backend.sync_status([41])[0].phase == ObservedPhase.RUNNING)
    if mode == c.Mode.DRA:
        assert backend.sync_status([41])[0].allocated_devices == ((0, f"{DRIVER}/{node}/gpu-0"),)
    assert [o.name for o in backend.list_objects()] == [request.name]
    backend.release(41, request.name, delete_home=True)
    wait_for("pod gone", lambda: get_pod(kube_stack, workloads, request.name) is None)

    # and a request outside the Role is refused: a pod in another namespace, a Secret
    outside = KubernetesBackend(gateway, dataclasses.replace(config(mode), namespace=elsewhere))
    with pytest.raises(ClusterApiError) as refused:
        outside.materialize(dataclasses.replace(request, name="cs-outside"))
    assert (refused.value.status, refused.value.permanent) == (403, True)
    status, _ = kube_stack.request("GET", f"/api/v1/namespaces/{workloads}/secrets", token=token)
    assert status == 403
    if mode != c.Mode.HAMI_BIND:  # only hami-bind takes HAMi's node lock
        with pytest.raises(ClusterApiError) as no_patch:
            gateway.cas_patch_node_annotations(node, {c.HAMI_NODE_LOCK: "x"}, "1")
        assert no_patch.value.status == 403
    assert gateway.get(Kind.POD, workloads, request.name) is None
    if mode == c.Mode.DRA:
        assert gateway.get_resource_claim(workloads, f"{request.name}-gpu") is None


def test_plain_manifests_grant_the_same_as_the_chart(kube_stack: KubeStack) -> None:
    # deploy/manifests are the chart's defaults rendered (release "tessera", hami-delegate), plus
    # optional/rbac-hami-bind.yaml for hami-bind
    manifests = ROOT / "deploy" / "manifests"
    files = ["00-namespaces.yaml", "10-serviceaccount.yaml", "20-rbac.yaml"]
    objects = [d for f in files for d in yaml.safe_load_all((manifests / f).read_text()) if d]
    install(kube_stack, objects, "tessera")
    create_namespace(kube_stack, "tessera-workloads")
    create_namespace(kube_stack, "tessera-elsewhere")
    user = "system:serviceaccount:tessera:tessera"
    workloads_needed, cluster_needed = needed(c.Mode.HAMI_DELEGATE)
    assert permissions(kube_stack, user, "tessera-workloads", "tessera-elsewhere") == {
        "workloads": workloads_needed,
        "elsewhere": set(),
        "cluster": cluster_needed,
        "koordinator": set(),
    }
    optional = [
        d
        for d in yaml.safe_load_all((manifests / "optional" / "rbac-hami-bind.yaml").read_text())
        if d
    ]
    install(kube_stack, optional, "tessera")
    workloads_needed, cluster_needed = needed(c.Mode.HAMI_BIND)
    granted = permissions(kube_stack, user, "tessera-workloads", "tessera-elsewhere")
    assert (granted["workloads"], granted["cluster"]) == (workloads_needed, cluster_needed)
    # optional/rbac-dra.yaml grants what dra mode needs on top (here on top of hami-bind's)
    install(kube_stack, plain_optional(manifests / "optional" / "rbac-dra.yaml"), "tessera")
    dra_workloads, dra_cluster = needed(c.Mode.DRA)
    granted = permissions(kube_stack, user, "tessera-workloads", "tessera-elsewhere")
    assert granted["workloads"] == workloads_needed | dra_workloads
    assert granted["cluster"] == cluster_needed | dra_cluster
    assert granted["elsewhere"] == set()


def plain_optional(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
