"""Pure functions: a MaterializeRequest → the Pod, PVC and Service dicts Tessera creates.

Names are deterministic (create-or-get is idempotent), labels link every object to its workload and
tenant, and the GPU part of the pod follows the configured mode exactly as k8s-integration.md
sections 1.5, 2.5 and 6.1 describe it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from scheduling.backends.base import MaterializeRequest, WorkloadKind
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes import dra, koordinator
from scheduling.backends.kubernetes.config import KubeConfig
from scheduling.backends.kubernetes.hami import encode_container_devices, gpu_cores_percent
from scheduling.backends.kubernetes.interface import ClusterApiError, JsonDict
from scheduling.backends.kubernetes.mig import static_mig_limits

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


class ManifestError(ClusterApiError):
    """The request cannot be expressed as a valid object for this mode (never retried)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


@dataclass(frozen=True, slots=True)
class WorkloadObjects:
    """Everything one workload needs; `home_pvc` and `service` exist for codespaces only, `claim`
    (the placement's ResourceClaim) for GPU workloads in dra mode only."""

    pod: JsonDict
    home_pvc: JsonDict | None
    service: JsonDict | None
    claim: JsonDict | None = None


def home_pvc_name(name: str) -> str:
    return f"{name}{c.HOME_VOLUME_SUFFIX}"


def intended_node(pod: JsonDict) -> str:
    """The node a pod is (or will be) on: `spec.nodeName`, else the node Tessera pinned it to
    (HAMi allocation annotation, Koordinator hint, or required hostname affinity); "" if none."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    annotations = pod.get("metadata", {}).get("annotations") or {}
    if annotations.get(c.HAMI_VGPU_NODE):
        return str(annotations[c.HAMI_VGPU_NODE])
    if annotations.get(c.KOORD_SCHEDULING_HINT):
        try:
            names = json.loads(annotations[c.KOORD_SCHEDULING_HINT]).get("nodeNames") or [""]
        except (ValueError, AttributeError):
            names = [""]
        return str(names[0])
    required = (
        (spec.get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == c.HOSTNAME_LABEL and expr.get("operator") == "In":
                return str((expr.get("values") or [""])[0])
    return ""


def workload_selector(workload_id: int) -> str:
    """Label selector of the objects of one workload."""
    return f"{c.MANAGED_SELECTOR},{c.WORKLOAD_ID_LABEL}={workload_id}"


def workload_labels(request: MaterializeRequest) -> dict[str, str]:
    """Labels on every object of a workload. Caller labels come first so ours always win."""
    labels = dict(request.labels)
    labels.update(
        {
            c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE,
            c.WORKLOAD_ID_LABEL: str(request.workload_id),
            c.WORKLOAD_KIND_LABEL: request.kind.value,
            c.TENANT_LABEL: request.tenant_slug,
        }
    )
    if request.placement_id is not None:
        labels[c.PLACEMENT_ID_LABEL] = str(request.placement_id)
    if len(request.name) <= 63:
        labels[c.WORKLOAD_NAME_LABEL] = request.name
    if request.gang_name:
        labels[c.GANG_LABEL] = request.gang_name
    bad = sorted(k for k, v in labels.items() if not _LABEL_VALUE.match(v))
    if bad:
        raise ManifestError(f"{request.name}: invalid label values for {', '.join(bad)}")
    return labels


def build_objects(request: MaterializeRequest, config: KubeConfig, *, now: int) -> WorkloadObjects:
    """All objects for a request. `now` (Unix seconds) stamps HAMi's vgpu-time/bind-time."""
    is_codespace = request.kind == WorkloadKind.CODESPACE
    with_claim = config.mode == c.Mode.DRA and bool(request.gpus)
    return WorkloadObjects(
        pod=build_pod(request, config, now=now),
        home_pvc=build_home_pvc(request, config) if is_codespace else None,
        service=build_service(request, config) if is_codespace else None,
        claim=dra.build_claim(request, config, workload_labels(request)) if with_claim else None,
    )


def build_home_pvc(request: MaterializeRequest, config: KubeConfig) -> JsonDict | None:
    """The codespace home: kept across stop/start, deleted only when the codespace is deleted."""
    if request.home_volume_gib <= 0:
        return None
    spec: JsonDict = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{request.home_volume_gib}Gi"}},
    }
    if config.storage_class:
        spec["storageClassName"] = config.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(request.home_name or home_pvc_name(request.name), request, config),
        "spec": spec,
    }


def build_service(request: MaterializeRequest, config: KubeConfig) -> JsonDict:
    """A ClusterIP Service in front of the codespace pod (the portal proxies connections to it)."""
    if not _DNS_LABEL.match(request.name):
        raise ManifestError(f"{request.name!r} is not a valid Service name (RFC 1035 label)")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(request.name, request, config),
        "spec": {
            "type": "ClusterIP",
            "selector": {
                c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE,
                c.WORKLOAD_ID_LABEL: str(request.workload_id),
            },
            "ports": [
                {
                    "name": "http",
                    "port": config.codespace_port,
                    "targetPort": "http",
                    "protocol": "TCP",
                }
            ],
        },
    }


def build_pod(request: MaterializeRequest, config: KubeConfig, *, now: int) -> JsonDict:
    """The pod, with requests, GPU resources, annotations and scheduling of the configured mode."""
    metadata = _metadata(request.name, request, config)
    metadata["annotations"] = {c.PRIORITY_ANNOTATION: str(request.priority)}
    if request.gang_name:
        metadata["annotations"][c.GANG_MIN_AVAILABLE_ANNOTATION] = str(request.gang_min_available)
    spec = _base_pod_spec(request, config)
    container = spec["containers"][0]
    if request.gpus and config.mode != c.Mode.DRA and any(g.mig_profile for g in request.gpus):
        _static_mig(request, spec, container)
    elif request.gpus:
        mode_parts = {
            c.Mode.HAMI_DELEGATE: _hami_delegate,
            c.Mode.HAMI_BIND: _hami_bind,
            c.Mode.KOORDINATOR: _koordinator,
            c.Mode.DRA: _dra,
        }[config.mode]
        mode_parts(request, config, metadata, spec, container, now)
    else:
        # CPU-only workloads go through the default scheduler, pinned to the planned node.
        spec["affinity"] = _node_affinity(request.node_name)
        if request.gang_name and config.mode == c.Mode.KOORDINATOR:
            metadata["annotations"].update(_gang(request, config))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _metadata(name: str, request: MaterializeRequest, config: KubeConfig) -> JsonDict:
    return {"name": name, "namespace": config.namespace, "labels": workload_labels(request)}


def _base_pod_spec(request: MaterializeRequest, config: KubeConfig) -> JsonDict:
    is_codespace = request.kind == WorkloadKind.CODESPACE
    resources = {"cpu": f"{request.cpu_milli}m", "memory": f"{request.memory_mib}Mi"}
    container: JsonDict = {
        "name": c.CODESPACE_CONTAINER if is_codespace else c.JOB_CONTAINER,
        "image": request.image,
        "imagePullPolicy": config.image_pull_policy,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
    }
    if request.command:
        container["command"] = list(request.command)
    if request.env:
        container["env"] = [{"name": k, "value": v} for k, v in request.env]
    spec: JsonDict = {
        "restartPolicy": "Always" if is_codespace else "Never",
        # Tenants must not reach the API from their pods (HAMi #3041: a pod creator can forge
        # GPU allocations), and codespaces do not need service links.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
    }
    if config.runtime_class:
        spec["runtimeClassName"] = config.runtime_class
    if is_codespace:
        container["ports"] = [
            {"name": "http", "containerPort": config.codespace_port, "protocol": "TCP"}
        ]
        if request.home_volume_gib > 0:
            container["volumeMounts"] = [{"name": "home", "mountPath": c.HOME_MOUNT_PATH}]
            spec["volumes"] = [
                {
                    "name": "home",
                    "persistentVolumeClaim": {
                        "claimName": request.home_name or home_pvc_name(request.name)
                    },
                }
            ]
    return spec


def _hami_limits(request: MaterializeRequest) -> dict[str, str]:
    memories = {gpu.gpu_memory_mib for gpu in request.gpus}
    cores = {gpu_cores_percent(gpu.gpu_milli) for gpu in request.gpus}
    if len(memories) != 1 or len(cores) != 1:
        raise ManifestError(
            f"{request.name}: HAMi gives every GPU of a container the same memory and cores; "
            f"got memory {sorted(memories)} MiB and cores {sorted(cores)} %"
        )
    return {
        c.HAMI_GPU: str(len(request.gpus)),
        c.HAMI_GPUMEM: str(memories.pop()),  # plain integer MiB, never "12Gi" (spec 1.1)
        c.HAMI_GPUCORES: str(cores.pop()),
    }


def _hami_delegate(
    request: MaterializeRequest,
    config: KubeConfig,
    metadata: JsonDict,
    spec: JsonDict,
    container: JsonDict,
    now: int,
) -> None:
    """Option A: hami-scheduler performs our decision; node by affinity, GPU by UUID."""
    container["resources"]["limits"].update(_hami_limits(request))
    metadata["annotations"][c.HAMI_USE_GPUUUID] = ",".join(gpu.uuid for gpu in request.gpus)
    metadata["annotations"][c.HAMI_GPU_SCHEDULER_POLICY] = "binpack"
    spec["schedulerName"] = config.hami_scheduler_name
    spec["affinity"] = _node_affinity(request.node_name)


def _node_affinity(node_name: str) -> JsonDict:
    """Required node affinity on `kubernetes.io/hostname` (spec section 6.1, option A)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": c.HOSTNAME_LABEL,
                                "operator": "In",
                                "values": [node_name],
                            }
                        ]
                    }
                ]
            }
        }
    }


def _hami_bind(
    request: MaterializeRequest,
    config: KubeConfig,
    metadata: JsonDict,
    spec: JsonDict,
    container: JsonDict,
    now: int,
) -> None:
    """Option B: a scheduler name nobody serves, HAMi's allocation annotations and label written
    at creation (so they are in place before any Allocate), then node lock + Binding."""
    container["resources"]["limits"].update(_hami_limits(request))
    devices = encode_container_devices(request.gpus)
    metadata["labels"][c.HAMI_VGPU_NODE] = request.node_name
    metadata["annotations"].update(
        {
            c.HAMI_VGPU_NODE: request.node_name,
            c.HAMI_VGPU_TIME: str(now),
            c.HAMI_DEVICES_TO_ALLOCATE: devices,
            c.HAMI_DEVICES_ALLOCATED: devices,
            c.HAMI_BIND_PHASE: "allocating",
            c.HAMI_BIND_TIME: str(now),
        }
    )
    spec["schedulerName"] = config.bind_scheduler_name


def _koordinator(
    request: MaterializeRequest,
    config: KubeConfig,
    metadata: JsonDict,
    spec: JsonDict,
    container: JsonDict,
    now: int,
) -> None:
    """koord-scheduler with a hard node hint and our GPU minors as the designated allocation."""
    shared = any(not koordinator.is_whole_gpu(gpu) for gpu in request.gpus)
    if shared and len(request.gpus) > 1:
        # Koordinator passes HAMi-core limits from devices[0] only (spec section 8, risk 4).
        raise ManifestError(
            f"{request.name}: shared multi-GPU pods are not enforceable under Koordinator"
        )
    gpu_resources = koordinator.container_resources(request.gpus)
    container["resources"]["requests"].update(gpu_resources)
    container["resources"]["limits"].update(gpu_resources)
    metadata["labels"][c.KOORD_ISOLATION_PROVIDER_LABEL] = c.KOORD_ISOLATION_HAMI_CORE
    metadata["labels"][c.KOORD_QUOTA_LABEL] = request.tenant_slug
    metadata["annotations"][c.KOORD_SCHEDULING_HINT] = koordinator.scheduling_hint(
        request.node_name
    )
    metadata["annotations"][c.KOORD_DEVICE_ALLOCATED] = koordinator.device_allocated(request.gpus)
    if request.gang_name:
        metadata["annotations"].update(_gang(request, config))
    spec["schedulerName"] = config.koord_scheduler_name


def _static_mig(request: MaterializeRequest, spec: JsonDict, container: JsonDict) -> None:
    """Static MIG outside dra mode: the NVIDIA device plugin (mixed strategy) hands out one instance of
    the profile on the planned node, through the default scheduler (HAMi and Koordinator do not place
    MIG instances). The device plugin picks which instance of that profile; the engine planned one of the
    node's free instances of it, so the counts agree."""
    (gpu,) = request.gpus if len(request.gpus) == 1 else (None,)
    if gpu is None:
        raise ManifestError(f"{request.name}: a MIG pod holds one instance")
    try:
        limits = static_mig_limits(gpu.mig_profile)
    except ValueError as exc:
        raise ManifestError(f"{request.name}: {exc}") from exc
    container["resources"]["limits"].update(limits)
    spec["affinity"] = _node_affinity(request.node_name)


def _dra(
    request: MaterializeRequest,
    config: KubeConfig,
    metadata: JsonDict,
    spec: JsonDict,
    container: JsonDict,
    now: int,
) -> None:
    """DRA: the default scheduler, pinned to the planned node, allocates the placement's claim (whose
    selectors pin the devices); the pod consumes it. No GPU extended resources."""
    if any(gpu.mig_profile for gpu in request.gpus) and len(request.gpus) > 1:
        raise ManifestError(f"{request.name}: a MIG pod holds one instance")
    spec["affinity"] = _node_affinity(request.node_name)
    dra.pod_claim_parts(request, spec, container)


def _gang(request: MaterializeRequest, config: KubeConfig) -> dict[str, str]:
    return koordinator.gang_annotations(
        request.gang_name, request.gang_min_available, config.gang_waiting_time
    )
