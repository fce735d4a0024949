"""`KubernetesBackend`: the Backend protocol over a ClusterGateway; `from_settings()` builds it from
Django settings (the only Django import of this package, done lazily inside `from_settings`).

Every method is idempotent. Cluster failures surface as BackendError (ClusterApiError): transient
ones (`permanent=False`: 5xx, timeouts, 409/410/429) are retried by the calling task with backoff,
permanent ones mark the workload FAILED with the message.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from scheduling.backends.base import (
    BackendObject,
    MaterializeRequest,
    MigLayoutPhase,
    MigLayoutRequest,
    MigLayoutStatus,
    NodeInventory,
    StatusReport,
)
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes import mig_manager
from scheduling.backends.kubernetes.binding import bind_with_lock, release_node_lock
from scheduling.backends.kubernetes.config import KubeConfig, parse_device_classes
from scheduling.backends.kubernetes.dra import allocated_devices, claim_name, dra_inventory
from scheduling.backends.kubernetes.interface import (
    ClusterApiError,
    ClusterGateway,
    JsonDict,
    Kind,
)
from scheduling.backends.kubernetes.inventory import nodes_to_inventory
from scheduling.backends.kubernetes.manifests import build_objects, home_pvc_name, intended_node
from scheduling.backends.kubernetes.status import PodTracker, pod_report, pod_workload_id

logger = logging.getLogger(__name__)


class KubernetesBackend:
    """Makes placements real as Pods (+ home PVC + Service for codespaces) in one namespace."""

    name = "kubernetes"

    def __init__(
        self,
        gateway: ClusterGateway,
        config: KubeConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        tracker: PodTracker | None = None,
    ) -> None:
        self.gateway = gateway
        self.config = config or KubeConfig()
        self.clock = clock
        self.tracker = tracker or PodTracker(
            gateway, self.config.namespace, watch_timeout_seconds=self.config.watch_timeout_seconds
        )

    # --- Backend protocol ----------------------------------------------------------------------

    def materialize(self, request: MaterializeRequest) -> None:
        """Create-or-get the home PVC, the Pod and the Service; in hami-bind mode also lock the
        node and bind the pod."""
        objects = build_objects(request, self.config, now=int(self.clock()))
        if objects.home_pvc is not None and request.home_name:
            self._ensure_home(objects.home_pvc, request)
        elif objects.home_pvc is not None:
            self._ensure(Kind.PVC, objects.home_pvc, request.workload_id)
        if objects.claim is not None:
            self._ensure_claim(objects.claim, request)
        pod = self._ensure(Kind.POD, objects.pod, request.workload_id)
        if pod.get("metadata", {}).get("deletionTimestamp"):
            raise ClusterApiError(
                f"pod {request.name} from a previous run is still terminating", status=409
            )
        placed_on = intended_node(pod)
        made_for = _placement_of(pod)
        stale = ""
        if placed_on and placed_on != request.node_name:
            stale = f"placed on {placed_on}, not {request.node_name}"
        elif made_for is not None and made_for != request.placement_id:
            stale = f"made for placement {made_for}, not {request.placement_id}"
        if stale:
            # A pod left over from an earlier placement: replace it, the retry creates ours.
            self.gateway.delete(Kind.POD, self.config.namespace, request.name)
            raise ClusterApiError(
                f"pod {request.name} was {stale}; deleted it, retry to recreate", status=409
            )
        is_mig = any(g.mig_profile for g in request.gpus)  # static MIG: the default scheduler binds
        if self.config.mode == c.Mode.HAMI_BIND and request.gpus and not is_mig:
            bind_with_lock(
                self.gateway, self.config.namespace, request.name, request.node_name, now=_utcnow
            )
        if objects.service is not None:
            self._ensure(Kind.SERVICE, objects.service, request.workload_id)

    def release(
        self,
        workload_id: int,
        name: str,
        *,
        delete_home: bool,
        home_name: str = "",
        placement_id: int | None = None,
    ) -> None:
        """Delete the pod of placement `placement_id` (None: of any placement) and the Service (the
        home PVC too when `delete_home`); missing is fine. A pod of a later placement of the same
        workload (same name) is kept, and so is the Service it uses. A pod without a placement label
        (made before they were set) is matched by workload. In hami-bind mode, a node lock still
        held by the pod is released. A named home (`home_name`) outlives the workload, so only its
        name and Tessera's label identify it."""
        namespace = self.config.namespace
        pod = self.gateway.get(Kind.POD, namespace, name)
        later_placement = False
        if pod is not None and self._owned(pod, workload_id):
            made_for = _placement_of(pod)
            later_placement = None not in (placement_id, made_for) and made_for != placement_id
        if pod is not None and self._owned(pod, workload_id) and not later_placement:
            self.gateway.delete(Kind.POD, namespace, name)
            if self.config.mode == c.Mode.HAMI_BIND:
                node = _pod_node(pod)
                if node and release_node_lock(self.gateway, node, namespace, name):
                    logger.info("released HAMi lock on %s held by deleted pod %s", node, name)
        if not later_placement:
            self._delete_owned(Kind.SERVICE, name, workload_id)
        if self.config.mode == c.Mode.DRA:
            self._release_claim(name, workload_id, placement_id)
        if delete_home and home_name:
            home = self.gateway.get(Kind.PVC, namespace, home_name)
            labels = (home or {}).get("metadata", {}).get("labels") or {}
            if labels.get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE:
                self.gateway.delete(Kind.PVC, namespace, home_name)
        elif delete_home:
            self._delete_owned(Kind.PVC, home_pvc_name(name), workload_id)
        self.tracker.forget(workload_id)

    def signal_reclaim(
        self,
        workload_id: int,
        name: str,
        *,
        deadline: datetime | None,
        reason: str,
        placement_id: int | None = None,
    ) -> bool:
        """Annotate the workload's pod with the reclaim deadline (RFC 3339, UTC) and the reason, a
        merge patch (None clears both). A pod that is missing, not Tessera's or of another placement
        is left alone (False)."""
        namespace = self.config.namespace
        pod = self.gateway.get(Kind.POD, namespace, name)
        if pod is None or not self._owned(pod, workload_id):
            return False
        made_for = _placement_of(pod)
        if None not in (placement_id, made_for) and made_for != placement_id:
            return False
        annotations: dict[str, str | None] = {
            c.RECLAIM_DEADLINE_ANNOTATION: None
            if deadline is None
            else deadline.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            c.RECLAIM_REASON_ANNOTATION: None
            if deadline is None
            else reason[: c.MAX_ANNOTATION_REASON],
        }
        self.gateway.patch_pod_metadata(namespace, name, annotations=annotations)
        return True

    def sync_status(self, workload_ids: Iterable[int]) -> Sequence[StatusReport]:
        """Refresh the pod cache (list once, then resume the watch) and report each workload."""
        self.tracker.refresh()
        reports = [pod_report(wid, self.tracker.pod(wid)) for wid in workload_ids]
        if self.config.mode != c.Mode.DRA:
            return reports
        allocated = self._claim_allocations()
        return [
            dataclasses.replace(r, allocated_devices=allocated[r.workload_id])
            if r.workload_id in allocated
            else r
            for r in reports
        ]

    def sync_inventory(self) -> Sequence[NodeInventory]:
        """Nodes with their GPUs (HAMi annotation, Koordinator Device, or GFD labels; in dra mode the
        driver's ResourceSlices, device taints making a card unhealthy)."""
        if self.config.mode == c.Mode.DRA:
            return dra_inventory(
                self.gateway.list_nodes(),
                self.gateway.list_resource_slices(),
                self.config.dra_driver,
            )
        prefer_koordinator = self.config.mode == c.Mode.KOORDINATOR
        devices = self.gateway.list_koordinator_devices() if prefer_koordinator else []
        return nodes_to_inventory(
            self.gateway.list_nodes(), devices, prefer_koordinator=prefer_koordinator
        )

    def apply_mig_layout(self, request: MigLayoutRequest) -> None:
        """Device-plugin modes: write the node's config into the MIG manager's mig-parted ConfigMap, then
        label the node with its name (kubernetes/mig_manager.py); both only when not done already. dra
        mode: refused, NVIDIA's DRA driver creates MIG devices itself (docs/kubernetes.md)."""
        if self.config.mode == c.Mode.DRA:
            raise ClusterApiError(
                "dynamic MIG by reconfiguration is not used in dra mode: NVIDIA's DRA driver creates "
                "MIG devices at allocation itself (its DynamicMIG feature gate); unset mig_dynamic on "
                "this card",
                permanent=True,
            )
        models = {index: request.gpu_model for index, _layout in request.node_layouts}
        errors = mig_manager.config_errors(models, request.node_layouts)
        if errors:
            raise ClusterApiError("invalid MIG config: " + "; ".join(errors), permanent=True)
        name = mig_manager.config_name(request.node_name, request.node_layouts)
        entries = mig_manager.node_config(request.node_layouts)
        namespace, map_name = self.config.mig_config_namespace, self.config.mig_config_map
        current = self.gateway.get_config_map(namespace, map_name)
        text = ((current or {}).get("data") or {}).get(mig_manager.CONFIG_KEY) or ""
        try:
            document = json.loads(text) if text else None
        except ValueError as exc:  # not JSON: the operator's YAML, which Tessera does not rewrite
            raise ClusterApiError(
                f"ConfigMap {namespace}/{map_name} is not in the JSON form Tessera writes",
                permanent=True,
            ) from exc
        if ((document or {}).get("mig-configs") or {}).get(name) != entries:
            self.gateway.write_config_map(
                namespace,
                map_name,
                {
                    mig_manager.CONFIG_KEY: json.dumps(
                        mig_manager.with_config(document, name, entries), indent=1, sort_keys=True
                    )
                },
                str((current or {}).get("metadata", {}).get("resourceVersion") or ""),
            )
        node = self.gateway.get_node(request.node_name)
        if node is None:
            raise ClusterApiError(f"node {request.node_name} is gone", permanent=True)
        labels = node.get("metadata", {}).get("labels") or {}
        if labels.get(mig_manager.MIG_CONFIG_LABEL) != name:
            # the old state label goes with the old config, so a stale "success" is never read as ours
            self.gateway.cas_patch_node_labels(
                request.node_name,
                {mig_manager.MIG_CONFIG_LABEL: name, mig_manager.MIG_CONFIG_STATE_LABEL: None},
                str(node["metadata"].get("resourceVersion") or ""),
            )

    def mig_layout_status(self, request: MigLayoutRequest) -> MigLayoutStatus:
        """What the MIG manager reports on the node for the config `request` asked for."""
        node = self.gateway.get_node(request.node_name)
        if node is None:
            return MigLayoutStatus(MigLayoutPhase.FAILED, f"node {request.node_name} is gone")
        name = mig_manager.config_name(request.node_name, request.node_layouts)
        return mig_manager.manager_status(node.get("metadata", {}).get("labels") or {}, name)

    def list_objects(self) -> Sequence[BackendObject]:
        """Tessera's pods in the namespace (the orphan reconciler decides which must go). Pods
        without a Tessera workload id are never listed, even if the selector was ignored."""
        pods, _ = self.gateway.list_pods(self.config.namespace, c.MANAGED_SELECTOR)
        return sorted(
            (
                BackendObject(pod["metadata"]["name"], wid, _placement_of(pod))
                for pod in pods
                if (wid := pod_workload_id(pod)) is not None
            ),
            key=lambda o: o.name,
        )

    # --- internals -----------------------------------------------------------------------------

    def _ensure(self, kind: Kind, body: JsonDict, workload_id: int) -> JsonDict:
        """Create-or-get by name; a same-named object of another workload is a permanent error."""
        name = body["metadata"]["name"]
        for _ in range(2):
            try:
                return self.gateway.create(kind, self.config.namespace, body)
            except ClusterApiError as exc:
                if not exc.is_conflict:
                    raise
            existing = self.gateway.get(kind, self.config.namespace, name)
            if existing is None:
                continue  # deleted between our create and get: create again
            if not self._owned(existing, workload_id):
                raise ClusterApiError(
                    f"{kind.value}/{name} already exists for another workload", permanent=True
                )
            return existing
        raise ClusterApiError(f"{kind.value}/{name}: create and delete keep racing", status=409)

    def _ensure_home(self, body: JsonDict, request: MaterializeRequest) -> JsonDict:
        """Create-or-get a named home volume that outlives workloads: the codespace's next workload
        mounts the one its previous workload left (same name, Tessera's, same tenant)."""
        name = body["metadata"]["name"]
        try:
            return self.gateway.create(Kind.PVC, self.config.namespace, body)
        except ClusterApiError as exc:
            if not exc.is_conflict:
                raise
        existing = self.gateway.get(Kind.PVC, self.config.namespace, name)
        labels = (existing or {}).get("metadata", {}).get("labels") or {}
        if existing is None or (
            labels.get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE
            and labels.get(c.TENANT_LABEL) == request.tenant_slug
        ):
            return existing or self.gateway.create(Kind.PVC, self.config.namespace, body)
        raise ClusterApiError(
            f"persistentvolumeclaims/{name} exists but is not this tenant's Tessera home",
            permanent=True,
        )

    def _ensure_claim(self, body: JsonDict, request: MaterializeRequest) -> JsonDict:
        """Create-or-get the placement's ResourceClaim. A claim of the same name left by an earlier
        placement of the workload pins other devices: it is deleted and the retry creates ours."""
        namespace, name = self.config.namespace, body["metadata"]["name"]
        try:
            return self.gateway.create_resource_claim(namespace, body)
        except ClusterApiError as exc:
            if not exc.is_conflict:
                raise
        existing = self.gateway.get_resource_claim(namespace, name)
        if existing is None:
            raise ClusterApiError(f"resourceclaims/{name} deleted meanwhile; retry", status=409)
        if not self._owned(existing, request.workload_id):
            raise ClusterApiError(
                f"resourceclaims/{name} already exists for another workload", permanent=True
            )
        made_for = _placement_of(existing)
        if made_for is not None and made_for != request.placement_id:
            self.gateway.delete_resource_claim(namespace, name)
            raise ClusterApiError(
                f"resourceclaims/{name} was made for placement {made_for}; deleted it, retry",
                status=409,
            )
        return existing

    def _release_claim(self, pod_name: str, workload_id: int, placement_id: int | None) -> None:
        """Delete the placement's claim (the driver frees its devices); a later placement's is kept."""
        namespace, name = self.config.namespace, claim_name(pod_name)
        existing = self.gateway.get_resource_claim(namespace, name)
        if existing is None or not self._owned(existing, workload_id):
            return
        made_for = _placement_of(existing)
        if None not in (placement_id, made_for) and made_for != placement_id:
            return
        self.gateway.delete_resource_claim(namespace, name)

    def _claim_allocations(self) -> dict[int, tuple[tuple[int, str], ...]]:
        """Workload id -> the devices its claim was allocated (one list call for the namespace)."""
        out: dict[int, tuple[tuple[int, str], ...]] = {}
        for claim in self.gateway.list_resource_claims(self.config.namespace, c.MANAGED_SELECTOR):
            labels = claim.get("metadata", {}).get("labels") or {}
            try:
                workload_id = int(labels.get(c.WORKLOAD_ID_LABEL, ""))
            except ValueError:
                continue
            devices = allocated_devices(claim)
            if devices:
                out[workload_id] = devices
        return out

    def _delete_owned(self, kind: Kind, name: str, workload_id: int) -> None:
        existing = self.gateway.get(kind, self.config.namespace, name)
        if existing is not None and self._owned(existing, workload_id):
            self.gateway.delete(kind, self.config.namespace, name)

    @staticmethod
    def _owned(obj: JsonDict, workload_id: int) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return labels.get(c.WORKLOAD_ID_LABEL) == str(workload_id)


def _placement_of(pod: JsonDict) -> int | None:
    """The placement id a pod was made for (its label), None for pods made before it was set."""
    raw = (pod.get("metadata", {}).get("labels") or {}).get(c.PLACEMENT_ID_LABEL)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _pod_node(pod: JsonDict) -> str:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    return str(annotations.get(c.HAMI_VGPU_NODE) or (pod.get("spec") or {}).get("nodeName") or "")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def config_from_settings(settings: Any) -> KubeConfig:
    """KubeConfig from a settings object; every name is optional (getattr with the default)."""
    defaults = KubeConfig()
    return KubeConfig(
        kubeconfig=getattr(settings, "TESSERA_KUBECONFIG", defaults.kubeconfig),
        context=getattr(settings, "TESSERA_KUBE_CONTEXT", defaults.context),
        namespace=getattr(settings, "TESSERA_KUBE_NAMESPACE", defaults.namespace),
        mode=getattr(settings, "TESSERA_KUBE_MODE", defaults.mode),
        image_pull_policy=getattr(
            settings, "TESSERA_CODESPACE_IMAGE_PULL_POLICY", defaults.image_pull_policy
        ),
        codespace_port=int(getattr(settings, "TESSERA_CODESPACE_PORT", defaults.codespace_port)),
        storage_class=getattr(settings, "TESSERA_KUBE_STORAGE_CLASS", defaults.storage_class),
        runtime_class=getattr(settings, "TESSERA_KUBE_RUNTIME_CLASS", defaults.runtime_class),
        dra_driver=getattr(settings, "TESSERA_KUBE_DRA_DRIVER", defaults.dra_driver),
        mig_config_map=getattr(settings, "TESSERA_KUBE_MIG_CONFIG_MAP", defaults.mig_config_map),
        mig_config_namespace=getattr(
            settings, "TESSERA_KUBE_MIG_CONFIG_NAMESPACE", defaults.mig_config_namespace
        ),
        dra_device_classes=parse_device_classes(
            getattr(settings, "TESSERA_KUBE_DRA_DEVICE_CLASSES", "")
        )
        or defaults.dra_device_classes,
    )


def from_settings() -> KubernetesBackend:
    """The backend configured by Django settings. `TESSERA_KUBE_FAKE = True` swaps the cluster for
    an in-memory demo cluster (pods start at once) that lives in this process only."""
    from django.conf import settings

    config = config_from_settings(settings)
    if getattr(settings, "TESSERA_KUBE_FAKE", False):
        return KubernetesBackend(_demo_cluster(), config)
    from scheduling.backends.kubernetes.gateway import KubernetesGateway, api_client_from_kubeconfig

    api_client = api_client_from_kubeconfig(config.kubeconfig, config.context)
    gateway = KubernetesGateway(api_client, read_timeout=config.request_timeout_seconds)
    return KubernetesBackend(gateway, config)


@functools.cache
def _demo_cluster() -> ClusterGateway:
    from scheduling.backends.kubernetes.fake import demo_cluster

    return demo_cluster()
