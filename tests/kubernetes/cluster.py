"""What the tests do on the real API server beside Tessera: fake GPU nodes (KWOK), what the
schedulers Tessera delegates to would write, and waiting for what KWOK makes happen."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from scheduling.backends.kubernetes import constants as c
from tests.kubernetes.stack import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE, KubeStack

_T = TypeVar("_T")
APPLY = "application/apply-patch+yaml"
FIELD_MANAGER = "tessera-tests"


def kwok_node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    cpu: str = "64",
    memory: str = "512Gi",
) -> dict[str, Any]:
    """A Node that KWOK manages (it makes it Ready and runs the pods bound to it)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})},
            "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE, **(annotations or {})},
        },
        "spec": {
            "taints": [],
        },
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        },
    }


def create_node(stack: KubeStack, node: dict[str, Any]) -> dict[str, Any]:
    """Create the node, or replace its metadata when a test of this session already made it."""
    status, body = stack.request("POST", "/api/v1/nodes", node)
    if status == 409:
        name = node["metadata"]["name"]
        status, body = stack.request(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"metadata": {k: node["metadata"][k] for k in ("labels", "annotations")}},
            content_type="application/merge-patch+json",
        )
    assert status in (200, 201), body
    return dict(body)


def wait_for(what: str, probe: Callable[[], _T | None], timeout: float = 30.0) -> _T:
    """Poll `probe` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def node_ready(stack: KubeStack, name: str) -> bool:
    status, body = stack.request("GET", f"/api/v1/nodes/{name}")
    conditions = (body.get("status") or {}).get("conditions") or [] if status == 200 else []
    return any(x.get("type") == "Ready" and x.get("status") == "True" for x in conditions)


def get_pod(stack: KubeStack, namespace: str, name: str) -> dict[str, Any] | None:
    status, body = stack.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return dict(body) if status == 200 else None


def pod_phase(stack: KubeStack, namespace: str, name: str) -> str:
    pod = get_pod(stack, namespace, name)
    return str(((pod or {}).get("status") or {}).get("phase") or "") if pod else ""


def bind(stack: KubeStack, namespace: str, pod: str, node: str) -> None:
    """POST pods/binding, as a scheduler does."""
    status, body = stack.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/{pod}/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
    )
    assert status == 201, body


def play_hami_scheduler(stack: KubeStack, namespace: str, pod: str, node: str) -> None:
    """What hami-scheduler and HAMi's device plugin write on a pod Tessera delegated to them
    (hami-delegate): the devices it chose (the GPU Tessera asked for with use-gpuuuid), the
    node, bind-phase success, then the binding."""
    current = get_pod(stack, namespace, pod)
    assert current is not None, f"pod {pod} not found"
    annotations = current["metadata"].get("annotations") or {}
    limits = current["spec"]["containers"][0]["resources"].get("limits") or {}
    uuid = annotations[c.HAMI_USE_GPUUUID]
    devices = f"{uuid},NVIDIA,{limits[c.HAMI_GPUMEM]},{limits[c.HAMI_GPUCORES]}:;"
    patch = {
        "metadata": {
            "annotations": {
                c.HAMI_DEVICES_ALLOCATED: devices,
                c.HAMI_VGPU_NODE: node,
                c.HAMI_BIND_PHASE: "success",
            }
        }
    }
    status, body = stack.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{pod}",
        patch,
        content_type="application/merge-patch+json",
    )
    assert status == 200, body
    bind(stack, namespace, pod, node)


def play_koord_scheduler(stack: KubeStack, namespace: str, pod: str) -> None:
    """koord-scheduler binds a pod to the node of Tessera's scheduling hint (and keeps the
    device-allocated annotation Tessera wrote)."""
    current = get_pod(stack, namespace, pod)
    assert current is not None, f"pod {pod} not found"
    hint = json.loads(current["metadata"]["annotations"][c.KOORD_SCHEDULING_HINT])
    bind(stack, namespace, pod, hint["nodeNames"][0])


def apply(stack: KubeStack, path: str, manifest: str, *, dry_run: bool) -> tuple[int, Any]:
    """Server-side apply of one object (YAML or JSON) at its resource path."""
    query = f"?fieldManager={FIELD_MANAGER}&force=true" + ("&dryRun=All" if dry_run else "")
    return stack.request("PATCH", f"{path}{query}", manifest, content_type=APPLY)
