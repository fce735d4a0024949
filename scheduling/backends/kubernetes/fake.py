"""An in-memory cluster behind the gateway interface, for unit tests and portal demos.

It encodes the API semantics Tessera relies on (k8s-integration.md section 7): every write bumps a
global resourceVersion; creating a taken name answers 409; merge patches delete keys set to None;
a node patch carrying a stale resourceVersion answers 409; binding answers 409 when the pod is
already bound; label selectors and the `spec.nodeName` field selector filter lists; a watch resumes
after a resourceVersion and answers 410 Gone once that version has been compacted away.

With `auto_start=True` (demos), a pod whose node is known (binding, `spec.nodeName`, node affinity
or Koordinator hint) is scheduled there and turns Running at once.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.interface import (
    ClusterApiError,
    JsonDict,
    Kind,
    WatchEvent,
    WatchExpired,
)
from scheduling.backends.kubernetes.manifests import intended_node


@dataclass(frozen=True, slots=True)
class _Event:
    resource_version: int
    type: str
    namespace: str
    object: JsonDict


def matches_selector(labels: Mapping[str, str], selector: str) -> bool:
    """Equality-based selectors: `a=b`, `a==b`, `a!=b`, `a` (exists), `!a`, comma = AND."""
    for raw in filter(None, (part.strip() for part in selector.split(","))):
        if "!=" in raw:
            key, value = raw.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in raw:
            key, value = raw.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif raw.startswith("!"):
            if raw[1:].strip() in labels:
                return False
        elif raw not in labels:
            return False
    return True


def merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 merge patch in place: dicts merge recursively, None deletes, the rest replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        elif isinstance(value, Mapping):
            target[key] = {}
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeCluster:
    """A thread-safe in-memory implementation of `ClusterGateway` plus helpers to drive it."""

    def __init__(self, *, auto_start: bool = False, history_limit: int = 1000) -> None:
        self.auto_start = auto_start
        self.history_limit = history_limit
        self.calls: list[str] = []  # operation names, in order (for assertions)
        self._lock = threading.RLock()
        self._rv = 0
        self._objects: dict[tuple[Kind, str, str], JsonDict] = {}
        self._nodes: dict[str, JsonDict] = {}
        self._devices: dict[str, JsonDict] = {}
        self._slices: dict[str, JsonDict] = {}  # DRA ResourceSlices by name (cluster-scoped)
        self._claims: dict[tuple[str, str], JsonDict] = {}  # ResourceClaims by (namespace, name)
        self._config_maps: dict[tuple[str, str], JsonDict] = {}  # by (namespace, name)
        self._events: list[_Event] = []
        self._oldest_watchable = 0
        self._failures: dict[str, list[int | None]] = {}
        self.devices_crd_installed = True

    # --- gateway interface ---------------------------------------------------------------------

    def create(self, kind: Kind, namespace: str, body: JsonDict) -> JsonDict:
        with self._lock:
            self._enter("create")
            obj = copy.deepcopy(body)
            meta = obj.setdefault("metadata", {})
            name = meta.get("name", "")
            key = (kind, namespace, name)
            if not name:
                raise ClusterApiError(f"{kind.value}: metadata.name is required", status=422)
            if key in self._objects:
                raise ClusterApiError(
                    f'{kind.value} "{name}" already exists', status=409, reason="AlreadyExists"
                )
            meta.update(
                namespace=namespace,
                uid=str(uuid.uuid4()),
                creationTimestamp=_now(),
                resourceVersion=self._bump(),
            )
            if kind == Kind.POD:
                obj.setdefault("status", {"phase": "Pending", "conditions": []})
                if obj.get("spec", {}).get("nodeName"):
                    self._schedule(obj, obj["spec"]["nodeName"])
                elif self.auto_start and (target := intended_node(obj)):
                    self._schedule(obj, target)
            self._objects[key] = obj
            self._record(kind, "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, kind: Kind, namespace: str, name: str) -> JsonDict | None:
        with self._lock:
            self._enter("get")
            obj = self._objects.get((kind, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        with self._lock:
            self._enter("delete")
            obj = self._objects.pop((kind, namespace, name), None)
            if obj is None:
                return False
            obj["metadata"]["resourceVersion"] = self._bump()
            self._record(kind, "DELETED", obj)
            return True

    def list_pods(
        self, namespace: str, label_selector: str, *, node_name: str = ""
    ) -> tuple[list[JsonDict], str]:
        with self._lock:
            self._enter("list_pods")
            items = [
                copy.deepcopy(obj)
                for (kind, ns, _), obj in sorted(self._objects.items())
                if kind == Kind.POD
                and ns == namespace
                and matches_selector(obj["metadata"].get("labels", {}), label_selector)
                and (not node_name or obj.get("spec", {}).get("nodeName") == node_name)
            ]
            return items, str(self._rv)

    def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> JsonDict:
        with self._lock:
            self._enter("patch_pod_metadata")
            obj = self._require(Kind.POD, namespace, name)
            merge_patch(
                obj, {"metadata": {"labels": labels or {}, "annotations": annotations or {}}}
            )
            obj["metadata"]["resourceVersion"] = self._bump()
            self._record(Kind.POD, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def bind_pod(self, namespace: str, name: str, node_name: str) -> None:
        with self._lock:
            self._enter("bind_pod")
            obj = self._require(Kind.POD, namespace, name)
            if obj.get("spec", {}).get("nodeName"):
                raise ClusterApiError(
                    f'pod "{name}" is already assigned to node "{obj["spec"]["nodeName"]}"',
                    status=409,
                    reason="Conflict",
                )
            self._schedule(obj, node_name)
            obj["metadata"]["resourceVersion"] = self._bump()
            self._record(Kind.POD, "MODIFIED", obj)

    def watch_pods(
        self,
        namespace: str,
        label_selector: str,
        resource_version: str,
        timeout_seconds: int,
    ) -> Iterator[WatchEvent]:
        with self._lock:
            self._enter("watch_pods")
            since = int(resource_version or 0)
            if since < self._oldest_watchable:
                raise WatchExpired(f"too old resource version: {since} ({self._oldest_watchable})")
            events = [
                WatchEvent(e.type, copy.deepcopy(e.object))
                for e in self._events
                if e.resource_version > since
                and e.namespace == namespace
                and matches_selector(e.object["metadata"].get("labels", {}), label_selector)
            ]
        return iter(events)

    def list_nodes(self) -> list[JsonDict]:
        with self._lock:
            self._enter("list_nodes")
            return [copy.deepcopy(node) for _, node in sorted(self._nodes.items())]

    def get_node(self, name: str) -> JsonDict | None:
        with self._lock:
            self._enter("get_node")
            node = self._nodes.get(name)
            return copy.deepcopy(node) if node is not None else None

    def cas_patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], resource_version: str
    ) -> JsonDict:
        with self._lock:
            self._enter("cas_patch_node_annotations")
            node = self._nodes.get(name)
            if node is None:
                raise ClusterApiError(f'node "{name}" not found', status=404, reason="NotFound")
            current = node["metadata"]["resourceVersion"]
            if resource_version != current:
                raise ClusterApiError(
                    f'Operation cannot be fulfilled on nodes "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    status=409,
                    reason="Conflict",
                )
            merge_patch(node, {"metadata": {"annotations": dict(annotations)}})
            node["metadata"]["resourceVersion"] = self._bump()
            return copy.deepcopy(node)

    def cas_patch_node_labels(
        self, name: str, labels: Mapping[str, str | None], resource_version: str
    ) -> JsonDict:
        with self._lock:
            self._enter("cas_patch_node_labels")
            node = self._nodes.get(name)
            if node is None:
                raise ClusterApiError(f'node "{name}" not found', status=404, reason="NotFound")
            if resource_version != node["metadata"]["resourceVersion"]:
                raise ClusterApiError(
                    f'Operation cannot be fulfilled on nodes "{name}": the object has been modified',
                    status=409,
                    reason="Conflict",
                )
            merge_patch(node, {"metadata": {"labels": dict(labels)}})
            node["metadata"]["resourceVersion"] = self._bump()
            return copy.deepcopy(node)

    def get_config_map(self, namespace: str, name: str) -> JsonDict | None:
        with self._lock:
            self._enter("get_config_map")
            found = self._config_maps.get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def write_config_map(
        self, namespace: str, name: str, data: Mapping[str, str], resource_version: str
    ) -> JsonDict:
        with self._lock:
            self._enter("write_config_map")
            current = self._config_maps.get((namespace, name))
            current_version = current["metadata"]["resourceVersion"] if current else ""
            if resource_version != current_version:
                raise ClusterApiError(
                    f'configmaps "{name}" already exists or was modified',
                    status=409,
                    reason="Conflict",
                )
            stored = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "resourceVersion": self._bump()},
                "data": dict(data),
            }
            self._config_maps[(namespace, name)] = stored
            return copy.deepcopy(stored)

    def set_node_label(self, name: str, key: str, value: str | None) -> None:
        """Test hook: what another controller (NVIDIA's MIG manager) writes on a node."""
        with self._lock:
            node = self._nodes[name]
            merge_patch(node, {"metadata": {"labels": {key: value}}})
            node["metadata"]["resourceVersion"] = self._bump()

    def list_koordinator_devices(self) -> list[JsonDict]:
        with self._lock:
            self._enter("list_koordinator_devices")
            if not self.devices_crd_installed:
                return []
            return [copy.deepcopy(d) for _, d in sorted(self._devices.items())]

    # --- Dynamic Resource Allocation -----------------------------------------------------------

    def list_resource_slices(self, node_name: str = "") -> list[JsonDict]:
        with self._lock:
            self._enter("list_resource_slices")
            return [
                copy.deepcopy(s)
                for _, s in sorted(self._slices.items())
                if not node_name or s.get("spec", {}).get("nodeName") == node_name
            ]

    def create_resource_claim(self, namespace: str, body: JsonDict) -> JsonDict:
        with self._lock:
            self._enter("create_resource_claim")
            obj = copy.deepcopy(body)
            meta = obj.setdefault("metadata", {})
            key = (namespace, str(meta.get("name", "")))
            if not key[1]:
                raise ClusterApiError("resourceclaims: metadata.name is required", status=422)
            if key in self._claims:
                raise ClusterApiError(
                    f'resourceclaims "{key[1]}" already exists', status=409, reason="AlreadyExists"
                )
            meta.update(namespace=namespace, uid=str(uuid.uuid4()), resourceVersion=self._bump())
            self._claims[key] = obj
            return copy.deepcopy(obj)

    def get_resource_claim(self, namespace: str, name: str) -> JsonDict | None:
        with self._lock:
            self._enter("get_resource_claim")
            obj = self._claims.get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list_resource_claims(self, namespace: str, label_selector: str) -> list[JsonDict]:
        with self._lock:
            self._enter("list_resource_claims")
            return [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(self._claims.items())
                if ns == namespace
                and matches_selector(obj["metadata"].get("labels", {}), label_selector)
            ]

    def delete_resource_claim(self, namespace: str, name: str) -> bool:
        with self._lock:
            self._enter("delete_resource_claim")
            return self._claims.pop((namespace, name), None) is not None

    # --- helpers for tests and demos -----------------------------------------------------------

    def add_resource_slice(self, resource_slice: JsonDict) -> None:
        """Publish (or replace) a ResourceSlice as a DRA driver's kubelet plugin does."""
        with self._lock:
            self._slices[resource_slice["metadata"]["name"]] = copy.deepcopy(resource_slice)

    def allocate_claim(
        self, namespace: str, name: str, results: list[tuple[str, str, str, str]]
    ) -> None:
        """Write a claim's allocation as the scheduler does: (request, driver, pool, device) each."""
        with self._lock:
            claim = self._claims[(namespace, name)]
            claim["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": r, "driver": d, "pool": p, "device": dev}
                            for r, d, p, dev in results
                        ]
                    }
                }
            }
            claim["metadata"]["resourceVersion"] = self._bump()

    def fail_next(self, operation: str, status: int | None, times: int = 1) -> None:
        """Make the next `times` calls of `operation` fail with HTTP `status` (None = timeout)."""
        with self._lock:
            self._failures.setdefault(operation, []).extend([status] * times)

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str] | None = None,
        taints: list[JsonDict] | None = None,
        unschedulable: bool = False,
        ready: bool = True,
    ) -> JsonDict:
        """Add (or replace) a node."""
        with self._lock:
            node: JsonDict = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {c.HOSTNAME_LABEL: name, **(labels or {})},
                    "annotations": dict(annotations or {}),
                    "resourceVersion": self._bump(),
                },
                "spec": {"unschedulable": unschedulable, "taints": list(taints or [])},
                "status": {
                    "allocatable": dict(allocatable or {"cpu": "32", "memory": "256Gi"}),
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            }
            self._nodes[name] = node
            return copy.deepcopy(node)

    def add_device(self, device: JsonDict) -> None:
        """Add a Koordinator `Device` object (named after its node)."""
        with self._lock:
            self._devices[device["metadata"]["name"]] = copy.deepcopy(device)

    def set_node_annotation(self, name: str, key: str, value: str | None) -> None:
        """Change a node annotation as another actor would (bumps its resourceVersion)."""
        with self._lock:
            node = self._nodes[name]
            merge_patch(node, {"metadata": {"annotations": {key: value}}})
            node["metadata"]["resourceVersion"] = self._bump()

    def set_pod_status(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        reason: str = "",
        message: str = "",
        conditions: list[JsonDict] | None = None,
        container_statuses: list[JsonDict] | None = None,
    ) -> None:
        """Change a pod's status as the kubelet would."""
        with self._lock:
            obj = self._require(Kind.POD, namespace, name)
            status: JsonDict = {"phase": phase, "conditions": conditions or []}
            if reason:
                status["reason"] = reason
            if message:
                status["message"] = message
            if container_statuses is not None:
                status["containerStatuses"] = container_statuses
            obj["status"] = status
            obj["metadata"]["resourceVersion"] = self._bump()
            self._record(Kind.POD, "MODIFIED", obj)

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: older watches get 410 Gone."""
        with self._lock:
            self._events.clear()
            self._oldest_watchable = self._rv

    def objects(self, kind: Kind, namespace: str) -> list[str]:
        """Names of the objects of one kind in a namespace, sorted."""
        with self._lock:
            return sorted(n for (k, ns, n) in self._objects if k == kind and ns == namespace)

    # --- internals -----------------------------------------------------------------------------

    def _enter(self, operation: str) -> None:
        self.calls.append(operation)
        pending = self._failures.get(operation)
        if pending:
            status = pending.pop(0)
            if status is None:
                raise ClusterApiError(f"{operation}: timed out (injected)", status=None)
            raise ClusterApiError(f"{operation}: HTTP {status} (injected)", status=status)

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _require(self, kind: Kind, namespace: str, name: str) -> JsonDict:
        obj = self._objects.get((kind, namespace, name))
        if obj is None:
            raise ClusterApiError(f'{kind.value} "{name}" not found', status=404, reason="NotFound")
        return obj

    def _schedule(self, pod: JsonDict, node_name: str) -> None:
        pod.setdefault("spec", {})["nodeName"] = node_name
        status = pod.setdefault("status", {})
        conditions = [
            cond for cond in status.get("conditions", []) if cond.get("type") != "PodScheduled"
        ]
        conditions.append({"type": "PodScheduled", "status": "True"})
        status["conditions"] = conditions
        if self.auto_start:
            status["phase"] = "Running"
            status["conditions"].append({"type": "Ready", "status": "True"})

    def _record(self, kind: Kind, event_type: str, obj: JsonDict) -> None:
        if kind != Kind.POD:
            return
        rv = int(obj["metadata"]["resourceVersion"])
        namespace = obj["metadata"].get("namespace", "")
        self._events.append(_Event(rv, event_type, namespace, copy.deepcopy(obj)))
        if len(self._events) > self.history_limit:
            dropped = self._events.pop(0)
            self._oldest_watchable = dropped.resource_version


def demo_cluster() -> FakeCluster:
    """A small HAMi cluster for demos: two nodes with four A100-80GB each; pods start at once."""
    cluster = FakeCluster(auto_start=True)
    for n in range(2):
        name = f"demo-gpu-{n}"
        register = [
            {
                "id": f"GPU-demo{n}{i}00-0000-0000-0000-000000000000",
                "index": i,
                "count": 10,
                "devmem": 81920,
                "devcore": 100,
                "type": "NVIDIA-NVIDIA A100-SXM4-80GB",
                "numa": i // 2,
                "mode": "hami-core",
                "health": True,
            }
            for i in range(4)
        ]
        cluster.add_node(
            name,
            labels={"gpu": "on", c.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB", c.GFD_COUNT: "4"},
            annotations={c.HAMI_NODE_REGISTER: json.dumps(register)},
            allocatable={"cpu": "64", "memory": "512Gi", c.HAMI_GPU: "40"},
        )
    return cluster


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
