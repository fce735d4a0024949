"""A loopback Kubernetes API for contract tests: kmock's KubernetesEmulator in a background thread.

kmock 0.8 serves create / get / list / patch / delete with 409 on duplicate creates, but (see its
`k8s.py`) it has no resourceVersion, ignores label selectors, `resourceVersion` and
`timeoutSeconds` on watches (it streams every object as ADDED and then blocks forever), has no
`pods/binding`, cannot refuse a patch (it applies the patch before any reaction runs), and
recognises a watch only by `watch=true` while the official client sends `watch=True`. This
subclass adds only what the contract tests need, on top of kmock's own storage and routing:

- `watch=True` requests are routed as watches;
- a global resourceVersion stamped on every created/patched object and on list responses;
- compare-and-swap: a PATCH whose body carries `metadata.resourceVersion` that is not the stored
  one answers 409 before kmock applies it;
- watches served from an event history after the requested resourceVersion, ending like a server
  timeout, and a 410 ERROR event for versions older than `compact()`;
- `pods/binding` as a kmock reaction (201, or 409 when the pod is already bound).
"""

from __future__ import annotations

import asyncio
import copy
import re
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import attrs
import kmock
from kmock._internal import enums, rendering
from kmock._internal.k8s import KubernetesError, KubernetesObjectNotFoundError

_T = TypeVar("_T")

_RESOURCES = [
    ("v1/pods", "Pod", True),
    ("v1/persistentvolumeclaims", "PersistentVolumeClaim", True),
    ("v1/services", "Service", True),
    ("v1/nodes", "Node", False),
    ("v1/configmaps", "ConfigMap", True),
    ("resource.k8s.io/v1/resourceslices", "ResourceSlice", False),
    ("resource.k8s.io/v1/resourceclaims", "ResourceClaim", True),
]
BINDING_PATH = re.compile(r"^/api/v1/namespaces/[^/]+/pods/[^/]+/binding$")


@attrs.define(kw_only=True)
class ApiServerEmulator(kmock.KubernetesEmulator):
    """kmock's emulator plus resourceVersion, CAS patches, resumable watches and pods/binding."""

    resource_version: int = 0
    oldest_watchable: int = 0
    history: list[tuple[int, str, str | None, dict[str, Any]]] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self["post", BINDING_PATH] << self._serve_binding

    def compact(self) -> None:
        """Forget the watch history: resuming from an older version answers 410 Gone."""
        self.history.clear()
        self.oldest_watchable = self.resource_version

    def _next_version(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    async def _handle(self, request: rendering.Request) -> Any:
        if request.method == enums.method.GET and request.params.get("watch", "") == "True":
            # The official client sends `watch=True`; kmock only recognises `watch=true`.
            object.__setattr__(request, "action", enums.action.WATCH)
        action = request.action
        if request.resource is not None and action in (enums.action.CREATE, enums.action.UPDATE):
            if action == enums.action.UPDATE:
                self._check_precondition(request)
            if isinstance(request.data, dict):
                request.data.setdefault("metadata", {})["resourceVersion"] = self._next_version()
        response = await super()._handle(request)
        if request.resource is not None and response.status < 300:
            self._record(request)
        return response

    def _check_precondition(self, request: rendering.Request) -> None:
        wanted = (request.data or {}).get("metadata", {}).get("resourceVersion")
        key = _object_key(request, request.namespace, request.name)
        if wanted is None or key not in self.objects or self.objects[key].deleted:
            return
        current = self.objects[key].get("metadata", {}).get("resourceVersion")
        if str(wanted) != str(current):
            raise KubernetesError(
                status=409,
                reason="Conflict",
                message=f"Operation cannot be fulfilled on {request.name}: the object has been "
                "modified; please apply your changes to the latest version and try again",
            )

    def _record(self, request: rendering.Request) -> None:
        kinds = {
            enums.action.CREATE: "ADDED",
            enums.action.UPDATE: "MODIFIED",
            enums.action.DELETE: "DELETED",
        }
        if request.action not in kinds:
            return
        data = request.data if isinstance(request.data, dict) else {}
        name = request.name or data.get("metadata", {}).get("name")
        namespace = request.namespace or data.get("metadata", {}).get("namespace")
        obj = self.objects[_object_key(request, namespace, name)]
        raw = copy.deepcopy(obj.last.raw)
        if request.action == enums.action.DELETE:
            raw.setdefault("metadata", {})["resourceVersion"] = self._next_version()
        rv = int(raw.get("metadata", {}).get("resourceVersion", self.resource_version))
        plural = request.resource.plural if request.resource is not None else ""
        self.history.append(
            (rv, str(plural), namespace, {"type": kinds[request.action], "object": raw})
        )

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        body = await super()._serve_list(request)
        assert isinstance(body, dict)
        body["metadata"] = {"resourceVersion": str(self.resource_version)}
        return body

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        yield b""  # send the headers, as kmock does
        since = int(request.params.get("resourceVersion") or 0)
        if since < self.oldest_watchable:
            yield {
                "type": "ERROR",
                "object": {
                    "apiVersion": "v1",
                    "kind": "Status",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {since} ({self.oldest_watchable})",
                    "reason": "Expired",
                    "code": 410,
                },
            }
            return
        plural = request.resource.plural if request.resource is not None else ""
        for rv, kind, namespace, event in list(self.history):
            if rv > since and kind == plural and namespace == request.namespace:
                yield event
        # The stream ends here, as a real API server ends a watch after timeoutSeconds.

    async def _serve_binding(self, request: rendering.Request) -> rendering.Payload:
        key = _object_key(request, request.namespace, request.name)  # from .../pods/<name>
        if key not in self.objects or self.objects[key].deleted:
            raise KubernetesObjectNotFoundError()
        pod = self.objects[key]
        bound = pod.get("spec", {}).get("nodeName")
        if bound:
            raise KubernetesError(
                status=409,
                reason="Conflict",
                message=f'pod {request.name} is already assigned to node "{bound}"',
            )
        target = request.data["target"]["name"]
        pod.patch(
            {
                "spec": {"nodeName": target},
                "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]},
                "metadata": {"resourceVersion": self._next_version()},
            }
        )
        raw = copy.deepcopy(pod.last.raw)
        self.history.append(
            (self.resource_version, "pods", request.namespace, {"type": "MODIFIED", "object": raw})
        )
        return rendering.Response(
            status=201,
            payload={
                "apiVersion": "v1",
                "kind": "Status",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
        )


def _object_key(
    request: rendering.Request, namespace: str | None, name: str | None
) -> tuple[kmock.resource, str | None, str]:
    """The key of kmock's object store for the object a request addresses."""
    assert request.resource is not None
    assert name is not None
    return (request.resource, namespace, name)


class LoopbackApiServer:
    """Runs an ApiServerEmulator + kmock.Server on 127.0.0.1 in a background event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.emulator: ApiServerEmulator
        self.server: kmock.Server
        self.url = ""

    def __enter__(self) -> LoopbackApiServer:
        self.thread.start()
        self.call(self._start)
        return self

    def __exit__(self, *exc: object) -> None:
        self.call(self._stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` (sync or async) inside the server's event loop and return its result."""

        async def runner() -> Any:
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(runner(), self.loop).result(timeout=10)

    async def _start(self) -> None:
        self.emulator = ApiServerEmulator()
        # Declare the resources we use, so that lists work before the first create.
        for resource, kind, namespaced in _RESOURCES:
            self.emulator.resources[resource] = kmock.ResourceInfo(namespaced=namespaced, kind=kind)
        await self.emulator.__aenter__()
        self.server = kmock.Server(self.emulator)
        await self.server.__aenter__()
        self.url = str(self.server.url).rstrip("/")

    async def _stop(self) -> None:
        await self.server.__aexit__(None, None, None)
        await self.emulator.__aexit__(None, None, None)

    def add_object(self, resource: str, namespace: str | None, body: dict[str, Any]) -> None:
        """Seed an object (e.g. a Node) with a fresh resourceVersion."""

        def seed() -> None:
            seeded = copy.deepcopy(body)
            seeded.setdefault("metadata", {})["resourceVersion"] = self.emulator._next_version()
            name = seeded["metadata"]["name"]
            self.emulator.objects[resource, namespace, name] = seeded

        self.call(seed)

    def requests(self, predicate: Callable[[rendering.Request], bool]) -> list[rendering.Request]:
        """The requests the server received that satisfy `predicate`, oldest first."""
        return self.call(lambda: [r for r in self.emulator._requests if predicate(r)])

    def set_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """What kubelet does: write a pod's status, with a new resourceVersion and a MODIFIED
        watch event (so a resumed watch sees it, not only a fresh list)."""

        def write() -> None:
            pod = self.emulator.objects["v1/pods", namespace, name]
            pod.patch(
                {"status": status, "metadata": {"resourceVersion": self.emulator._next_version()}}
            )
            raw = copy.deepcopy(pod.last.raw)
            self.emulator.history.append(
                (
                    self.emulator.resource_version,
                    "pods",
                    namespace,
                    {"type": "MODIFIED", "object": raw},
                )
            )

        self.call(write)

    def set_node_label(self, name: str, key: str, value: str) -> None:
        """What another controller (NVIDIA's MIG manager) does: write one label of a node."""

        def write() -> None:
            node = self.emulator.objects["v1/nodes", None, name]
            node.patch(
                {
                    "metadata": {
                        "labels": {key: value},
                        "resourceVersion": self.emulator._next_version(),
                    }
                }
            )

        self.call(write)

    def stored(self, resource: str, namespace: str | None, name: str) -> dict[str, Any]:
        """The object as the server stores it now."""
        return self.call(
            lambda: copy.deepcopy(self.emulator.objects[resource, namespace, name].last.raw)
        )
