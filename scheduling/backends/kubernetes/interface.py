"""The narrow gateway interface between Tessera and a Kubernetes API server.

Two implementations: `gateway.KubernetesGateway` (the official client, the only module that imports
`kubernetes`) and `fake.FakeCluster` (in memory, for tests and demos). Objects cross this boundary
as plain JSON dicts, exactly as the API server sends them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from scheduling.backends.base import BackendError

JsonDict = dict[str, Any]

# Statuses a caller may simply retry: conflict (re-read and retry), gone (relist), timeout,
# too many requests. 5xx are retryable as well (see `is_transient_status`).
_TRANSIENT_4XX = frozenset({408, 409, 410, 429})


def is_transient_status(status: int | None) -> bool:
    """True when an HTTP status from the API server is worth retrying (None = no answer at all)."""
    return status is None or status >= 500 or status in _TRANSIENT_4XX


class ClusterApiError(BackendError):
    """A failed API call. `status` is the HTTP status (None for timeouts and connection errors);
    `permanent` follows `is_transient_status` unless given."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        permanent: bool | None = None,
    ) -> None:
        super().__init__(
            message,
            permanent=(not is_transient_status(status)) if permanent is None else permanent,
        )
        self.status = status
        self.reason = reason

    @property
    def is_conflict(self) -> bool:
        """409: already exists, or a resourceVersion precondition failed."""
        return self.status == 409

    @property
    def is_not_found(self) -> bool:
        return self.status == 404


class WatchExpired(ClusterApiError):
    """410 Gone: the resourceVersion a watch resumed from is too old. Relist, then watch again."""

    def __init__(self, message: str = "watch resourceVersion expired (410 Gone)") -> None:
        super().__init__(message, status=410, reason="Expired")


class Kind(enum.StrEnum):
    """The namespaced object kinds Tessera creates."""

    POD = "pods"
    PVC = "persistentvolumeclaims"
    SERVICE = "services"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK, and the object as a dict."""

    type: str
    object: JsonDict

    @property
    def resource_version(self) -> str:
        return str(self.object.get("metadata", {}).get("resourceVersion", ""))


class ClusterGateway(Protocol):
    """Every cluster call Tessera makes; each has a timeout, failures raise ClusterApiError."""

    def create(self, kind: Kind, namespace: str, body: JsonDict) -> JsonDict:
        """Create an object; 409 (ClusterApiError.is_conflict) when the name is taken."""
        ...

    def get(self, kind: Kind, namespace: str, name: str) -> JsonDict | None:
        """Read an object, None when it does not exist."""
        ...

    def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        """Delete an object; False when it did not exist."""
        ...

    def list_pods(
        self, namespace: str, label_selector: str, *, node_name: str = ""
    ) -> tuple[list[JsonDict], str]:
        """List pods matching an equality label selector (and `spec.nodeName` when given);
        returns (items, the list's resourceVersion to watch from)."""
        ...

    def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> JsonDict:
        """Merge-patch a pod's labels/annotations (None deletes a key)."""
        ...

    def bind_pod(self, namespace: str, name: str, node_name: str) -> None:
        """POST pods/binding; 409 when the pod is already bound."""
        ...

    def watch_pods(
        self,
        namespace: str,
        label_selector: str,
        resource_version: str,
        timeout_seconds: int,
    ) -> Iterator[WatchEvent]:
        """Stream pod events after `resource_version` until the server ends the watch.
        Raises WatchExpired (410) when that version is too old."""
        ...

    def list_nodes(self) -> list[JsonDict]:
        """All nodes of the cluster."""
        ...

    def get_node(self, name: str) -> JsonDict | None:
        """One node, None when it does not exist."""
        ...

    def cas_patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], resource_version: str
    ) -> JsonDict:
        """Merge-patch node annotations iff the node is still at `resource_version` (else 409)."""
        ...

    def cas_patch_node_labels(
        self, name: str, labels: Mapping[str, str | None], resource_version: str
    ) -> JsonDict:
        """Merge-patch node labels (None deletes) iff the node is still at `resource_version` (else 409)."""
        ...

    def get_config_map(self, namespace: str, name: str) -> JsonDict | None:
        """A ConfigMap, None when it does not exist."""
        ...

    def write_config_map(
        self, namespace: str, name: str, data: Mapping[str, str], resource_version: str
    ) -> JsonDict:
        """Create the ConfigMap (`resource_version` "") or replace its data iff it is still at
        `resource_version`; 409 when it exists already or changed meanwhile."""
        ...

    def list_koordinator_devices(self) -> list[JsonDict]:
        """Koordinator `Device` objects (cluster-scoped); [] when the CRD is not installed."""
        ...

    def list_resource_slices(self, node_name: str = "") -> list[JsonDict]:
        """DRA drivers' ResourceSlices (cluster-scoped; one node's when `node_name` is given)."""
        ...

    def create_resource_claim(self, namespace: str, body: JsonDict) -> JsonDict:
        """Create a ResourceClaim; 409 when the name is taken."""
        ...

    def get_resource_claim(self, namespace: str, name: str) -> JsonDict | None:
        """A ResourceClaim with its allocation status, None when it does not exist."""
        ...

    def list_resource_claims(self, namespace: str, label_selector: str) -> list[JsonDict]:
        """ResourceClaims matching an equality label selector."""
        ...

    def delete_resource_claim(self, namespace: str, name: str) -> bool:
        """Delete a ResourceClaim; False when it did not exist."""
        ...
