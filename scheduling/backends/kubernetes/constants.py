"""Names Tessera and the cluster agree on: labels, annotations, resources and modes.

The HAMi and Koordinator keys are copied from the integration spec (k8s-integration.md, sections 1,
2 and 6); the `tessera.io/*` keys are ours.
"""

from __future__ import annotations

import enum


class Mode(enum.StrEnum):
    """How a placement is made real in the cluster."""

    HAMI_DELEGATE = "hami-delegate"  # hami-scheduler schedules; we pin node and GPU
    HAMI_BIND = "hami-bind"  # we write HAMi's allocation annotations, take the node lock, bind
    KOORDINATOR = "koordinator"  # koord-scheduler, hint + designated allocation
    DRA = "dra"  # a ResourceClaim per placement, the device pinned by CEL; the default scheduler


#: The modes that shape GPU pods through HAMi or Koordinator resources (every mode but DRA).
DEVICE_PLUGIN_MODES = (Mode.HAMI_DELEGATE, Mode.HAMI_BIND, Mode.KOORDINATOR)


# --- Tessera's own metadata --------------------------------------------------------------------
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "tessera"
WORKLOAD_ID_LABEL = "tessera.io/workload-id"
PLACEMENT_ID_LABEL = "tessera.io/placement-id"  # releases and the orphan reconciler key on it
WORKLOAD_NAME_LABEL = "tessera.io/workload-name"
WORKLOAD_KIND_LABEL = "tessera.io/kind"
TENANT_LABEL = "tessera.io/tenant"
GANG_LABEL = "tessera.io/gang"
PRIORITY_ANNOTATION = "tessera.io/priority"
GANG_MIN_AVAILABLE_ANNOTATION = "tessera.io/gang-min-available"
CLAIM_SUFFIX = "-gpu"  # a placement's ResourceClaim is named after its pod (dra mode)
POD_CLAIM_NAME = "gpu"  # the pod's name for that claim (spec.resourceClaims, container claims)
# Polite reclaim: the workload is told when it will be stopped and why (checkpoint before then).
RECLAIM_DEADLINE_ANNOTATION = "tessera.io/reclaim-deadline"
RECLAIM_REASON_ANNOTATION = "tessera.io/reclaim-reason"
MAX_ANNOTATION_REASON = 1000
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"

HOME_VOLUME_SUFFIX = "-home"
HOME_MOUNT_PATH = "/home/tessera"
CODESPACE_CONTAINER = "workspace"
JOB_CONTAINER = "main"

# --- Kubernetes ----------------------------------------------------------------------------------
HOSTNAME_LABEL = "kubernetes.io/hostname"

# --- HAMi (spec section 1) -----------------------------------------------------------------------
HAMI_GPU = "nvidia.com/gpu"
HAMI_GPUMEM = "nvidia.com/gpumem"  # plain integer MiB per GPU
HAMI_GPUCORES = "nvidia.com/gpucores"  # percent per GPU
HAMI_USE_GPUUUID = "nvidia.com/use-gpuuuid"
HAMI_GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
HAMI_DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
HAMI_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_VGPU_NODE = "hami.io/vgpu-node"  # annotation *and* label
HAMI_VGPU_TIME = "hami.io/vgpu-time"
HAMI_BIND_PHASE = "hami.io/bind-phase"
HAMI_BIND_TIME = "hami.io/bind-time"
HAMI_NODE_LOCK = "hami.io/mutex.lock"
HAMI_NODE_REGISTER = "hami.io/node-nvidia-register"
HAMI_DEVICE_CORDON = "hami.io/device-cordon"
HAMI_NODE_LOCK_EXPIRE_SECONDS = 300  # HAMI_NODELOCK_EXPIRE default (5 min)

# --- Koordinator (spec section 2) ----------------------------------------------------------------
KOORD_GPU_CORE = "koordinator.sh/gpu-core"
KOORD_GPU_MEMORY = "koordinator.sh/gpu-memory"
KOORD_GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
KOORD_GPU_SHARED = "koordinator.sh/gpu.shared"
KOORD_ISOLATION_PROVIDER_LABEL = "koordinator.sh/gpu-isolation-provider"
KOORD_ISOLATION_HAMI_CORE = "HAMi-core"
KOORD_QUOTA_LABEL = "quota.scheduling.koordinator.sh/name"
KOORD_SCHEDULING_HINT = "internal.scheduling.koordinator.sh/scheduling-hint"
KOORD_DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
KOORD_GANG_NAME = "gang.scheduling.koordinator.sh/name"
KOORD_GANG_MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"
KOORD_GANG_TOTAL_NUMBER = "gang.scheduling.koordinator.sh/total-number"
KOORD_GANG_MODE = "gang.scheduling.koordinator.sh/mode"
KOORD_GANG_WAITING_TIME = "gang.scheduling.koordinator.sh/waiting-time"
KOORD_DEVICE_GROUP = "scheduling.koordinator.sh"
KOORD_DEVICE_VERSION = "v1alpha1"
KOORD_DEVICE_PLURAL = "devices"

# --- GPU Feature Discovery (spec section 6.3) ----------------------------------------------------
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_MEMORY = "nvidia.com/gpu.memory"  # MiB
