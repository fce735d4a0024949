"""The only module that imports `kubernetes`: the official client behind `ClusterGateway`.

Every call carries `_request_timeout` and `_preload_content=False`: responses are parsed as plain
JSON dicts, which sidesteps the client's model deserialisation (it fails on the `Status` body that
`pods/binding` answers with; kubernetes-client/python #547, #825, spec section 6.2). ApiException,
timeouts and connection errors become `ClusterApiError`, transient or permanent by HTTP status.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.interface import (
    ClusterApiError,
    JsonDict,
    Kind,
    WatchEvent,
    WatchExpired,
)

_T = TypeVar("_T")
_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


def api_client_from_kubeconfig(kubeconfig: str, context: str = "") -> client.ApiClient:
    """An ApiClient from a kubeconfig file, or from the pod's ServiceAccount when `kubeconfig` is
    "" (in-cluster)."""
    configuration = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(
                config_file=kubeconfig,
                context=context or None,
                client_configuration=configuration,
                persist_config=False,
            )
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        raise ClusterApiError(f"Kubernetes credentials: {exc}", permanent=True) from exc
    # One quick urllib3 retry on connection errors; everything else is retried by the calling
    # task with backoff, so a read timeout must not silently multiply by urllib3's default 3.
    configuration.retries = 1
    return client.ApiClient(configuration)


class KubernetesGateway:
    """`ClusterGateway` over the official client. Thread-compatible (one ApiClient per instance)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.timeout = (connect_timeout, read_timeout)

    # --- namespaced objects --------------------------------------------------------------------

    def create(self, kind: Kind, namespace: str, body: JsonDict) -> JsonDict:
        create = {
            Kind.POD: self.core.create_namespaced_pod,
            Kind.PVC: self.core.create_namespaced_persistent_volume_claim,
            Kind.SERVICE: self.core.create_namespaced_service,
        }[kind]
        return self._json(f"create {kind.value}", lambda **kw: create(namespace, body, **kw))

    def get(self, kind: Kind, namespace: str, name: str) -> JsonDict | None:
        read = {
            Kind.POD: self.core.read_namespaced_pod,
            Kind.PVC: self.core.read_namespaced_persistent_volume_claim,
            Kind.SERVICE: self.core.read_namespaced_service,
        }[kind]
        try:
            return self._json(f"get {kind.value}/{name}", lambda **kw: read(name, namespace, **kw))
        except ClusterApiError as exc:
            if exc.is_not_found:
                return None
            raise

    def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        remove = {
            Kind.POD: self.core.delete_namespaced_pod,
            Kind.PVC: self.core.delete_namespaced_persistent_volume_claim,
            Kind.SERVICE: self.core.delete_namespaced_service,
        }[kind]
        try:
            self._json(f"delete {kind.value}/{name}", lambda **kw: remove(name, namespace, **kw))
        except ClusterApiError as exc:
            if exc.is_not_found:
                return False
            raise
        return True

    def list_pods(
        self, namespace: str, label_selector: str, *, node_name: str = ""
    ) -> tuple[list[JsonDict], str]:
        field_selector = f"spec.nodeName={node_name}" if node_name else None
        body = self._json(
            "list pods",
            lambda **kw: self.core.list_namespaced_pod(
                namespace, label_selector=label_selector, field_selector=field_selector, **kw
            ),
        )
        return list(body.get("items") or []), str(body.get("metadata", {}).get("resourceVersion"))

    def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> JsonDict:
        # A dict body goes out as strategic-merge-patch+json; for metadata maps that is a merge.
        patch = {"metadata": {"labels": dict(labels or {}), "annotations": dict(annotations or {})}}
        return self._json(
            f"patch pods/{name}",
            lambda **kw: self.core.patch_namespaced_pod(name, namespace, patch, **kw),
        )

    def bind_pod(self, namespace: str, name: str, node_name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        self._json(
            f"bind pods/{name} to {node_name}",
            lambda **kw: self.core.create_namespaced_pod_binding(name, namespace, body, **kw),
        )

    def watch_pods(
        self,
        namespace: str,
        label_selector: str,
        resource_version: str,
        timeout_seconds: int,
    ) -> Iterator[WatchEvent]:
        response = self._call(
            "watch pods",
            lambda **kw: self.core.list_namespaced_pod(
                namespace,
                label_selector=label_selector,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                watch=True,
                **kw,
            ),
            read_timeout=timeout_seconds + self.timeout[1],
        )
        return self._events(response)

    # --- nodes and CRDs ------------------------------------------------------------------------

    def list_nodes(self) -> list[JsonDict]:
        return list(self._json("list nodes", self.core.list_node).get("items") or [])

    def get_node(self, name: str) -> JsonDict | None:
        try:
            return self._json(f"get nodes/{name}", lambda **kw: self.core.read_node(name, **kw))
        except ClusterApiError as exc:
            if exc.is_not_found:
                return None
            raise

    def cas_patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], resource_version: str
    ) -> JsonDict:
        # resourceVersion inside the patch body makes the API server compare-and-swap (409).
        patch = {
            "metadata": {"annotations": dict(annotations), "resourceVersion": resource_version}
        }
        return self._json(
            f"patch nodes/{name}", lambda **kw: self.core.patch_node(name, patch, **kw)
        )

    def cas_patch_node_labels(
        self, name: str, labels: Mapping[str, str | None], resource_version: str
    ) -> JsonDict:
        patch = {"metadata": {"labels": dict(labels), "resourceVersion": resource_version}}
        return self._json(
            f"patch nodes/{name}", lambda **kw: self.core.patch_node(name, patch, **kw)
        )

    def get_config_map(self, namespace: str, name: str) -> JsonDict | None:
        try:
            return self._json(
                f"get configmaps/{name}",
                lambda **kw: self.core.read_namespaced_config_map(name, namespace, **kw),
            )
        except ClusterApiError as exc:
            if exc.is_not_found:
                return None
            raise

    def write_config_map(
        self, namespace: str, name: str, data: Mapping[str, str], resource_version: str
    ) -> JsonDict:
        body: JsonDict = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": dict(data),
        }
        if not resource_version:
            return self._json(
                f"create configmaps/{name}",
                lambda **kw: self.core.create_namespaced_config_map(namespace, body, **kw),
            )
        body["metadata"]["resourceVersion"] = resource_version
        return self._json(
            f"replace configmaps/{name}",
            lambda **kw: self.core.replace_namespaced_config_map(name, namespace, body, **kw),
        )

    def list_koordinator_devices(self) -> list[JsonDict]:
        try:
            body = self._json(
                "list koordinator devices",
                lambda **kw: self.custom.list_cluster_custom_object(
                    c.KOORD_DEVICE_GROUP, c.KOORD_DEVICE_VERSION, c.KOORD_DEVICE_PLURAL, **kw
                ),
            )
        except ClusterApiError as exc:
            if exc.is_not_found:  # the CRD is not installed: no Koordinator on this cluster
                return []
            raise
        return list(body.get("items") or [])

    # --- Dynamic Resource Allocation (resource.k8s.io/v1, see scheduling.backends.kubernetes.mig) ---

    def list_resource_slices(self, node_name: str = "") -> list[JsonDict]:
        """The ResourceSlices drivers published (one node's when ``node_name`` is given)."""
        selector = f"spec.nodeName={node_name}" if node_name else None
        body = self._json(
            "list resourceslices",
            lambda **kw: self.resource.list_resource_slice(field_selector=selector, **kw),
        )
        return list(body.get("items") or [])

    def create_resource_claim(self, namespace: str, body: JsonDict) -> JsonDict:
        """Create a ResourceClaim (the engine's device pinned by its selector)."""
        return self._json(
            "create resourceclaim",
            lambda **kw: self.resource.create_namespaced_resource_claim(namespace, body, **kw),
        )

    def get_resource_claim(self, namespace: str, name: str) -> JsonDict | None:
        """A ResourceClaim with its allocation status, or ``None`` when it does not exist."""
        try:
            return self._json(
                f"get resourceclaim/{name}",
                lambda **kw: self.resource.read_namespaced_resource_claim(name, namespace, **kw),
            )
        except ClusterApiError as exc:
            if exc.is_not_found:
                return None
            raise

    def list_resource_claims(self, namespace: str, label_selector: str) -> list[JsonDict]:
        """The namespace's ResourceClaims matching an equality label selector (with their status)."""
        body = self._json(
            "list resourceclaims",
            lambda **kw: self.resource.list_namespaced_resource_claim(
                namespace, label_selector=label_selector, **kw
            ),
        )
        return list(body.get("items") or [])

    def delete_resource_claim(self, namespace: str, name: str) -> bool:
        """Delete a ResourceClaim (the driver then frees the device); False when it was already gone."""
        try:
            self._json(
                f"delete resourceclaim/{name}",
                lambda **kw: self.resource.delete_namespaced_resource_claim(name, namespace, **kw),
            )
        except ClusterApiError as exc:
            if exc.is_not_found:
                return False
            raise
        return True

    # --- plumbing ------------------------------------------------------------------------------

    def _json(self, what: str, call: Callable[..., Any]) -> JsonDict:
        response = self._call(what, call)
        try:
            data = response.data
            return json.loads(data) if data else {}
        except ValueError as exc:
            raise ClusterApiError(f"{what}: response is not JSON", status=502) from exc
        finally:
            response.release_conn()

    def _call(self, what: str, call: Callable[..., _T], *, read_timeout: float = 0) -> _T:
        timeout = (self.timeout[0], read_timeout or self.timeout[1])
        try:
            result = call(_preload_content=False, _request_timeout=timeout)
        except ApiException as exc:
            raise _api_error(what, exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterApiError(f"{what}: {type(exc).__name__}: {exc}", status=None) from exc
        status = getattr(result, "status", 200)
        if status not in (200, 201, 202):
            raise ClusterApiError(f"{what}: unexpected HTTP {status}", status=status)
        return result

    def _events(self, response: Any) -> Iterator[WatchEvent]:
        try:
            for line in iter_resp_lines(response):
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    code = obj.get("code")
                    if code == 410:
                        raise WatchExpired(f"watch pods: {obj.get('message', 'Gone')}")
                    raise ClusterApiError(
                        f"watch pods: {obj.get('reason', '')}: {obj.get('message', '')}",
                        status=code,
                    )
                if event.get("type") not in _EVENT_TYPES:
                    raise ClusterApiError(
                        f"watch pods: not a watch event: {line[:200]}", status=None
                    )
                yield WatchEvent(str(event["type"]), obj)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # A read timeout or a dropped connection ends this watch; the caller resumes it.
            if not isinstance(exc, urllib3.exceptions.ReadTimeoutError):
                raise ClusterApiError(f"watch pods: {type(exc).__name__}", status=None) from exc
        finally:
            response.close()
            response.release_conn()


def _api_error(what: str, exc: ApiException) -> ClusterApiError:
    """Turn an ApiException into ClusterApiError, with the server's Status message if present."""
    message = exc.reason or ""
    reason = ""
    try:
        status_body = json.loads(exc.body) if exc.body else {}
        message = status_body.get("message", message)
        reason = status_body.get("reason", "")
    except (ValueError, TypeError, AttributeError):
        pass
    if exc.status == 410:
        return WatchExpired(f"{what}: {message}")
    return ClusterApiError(
        f"{what}: HTTP {exc.status} {message}".strip(), status=exc.status, reason=reason
    )
