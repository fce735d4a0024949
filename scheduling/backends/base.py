"""The backend interface: how the scheduling service makes placements real on a cluster.

The scheduling service decides *where* a workload runs (with `core.placement`) and records it in the
database; a backend makes that decision real (a simulated pod, or a Kubernetes Pod + PVC + Service) and
reports back what the cluster says. Backends see plain dataclasses, never Django models, so each one can
be tested without a database and the service owns every state transition.

Two implementations: `scheduling.backends.simulated` (the default) and
`scheduling.backends.kubernetes` (HAMi / Koordinator). `scheduling.backends.registry.get_backend()`
returns the configured one.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


class WorkloadKind(str, enum.Enum):
    CODESPACE = "codespace"
    JOB_POD = "job_pod"


class ObservedPhase(str, enum.Enum):
    """What the cluster says about a materialized workload."""

    PENDING = "pending"  # accepted by the cluster, not running yet (image pull, binding, ...)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    MISSING = "missing"  # the cluster has no object for it (deleted outside Tessera)


@dataclass(frozen=True, slots=True)
class GpuBinding:
    """One GPU of the chosen node, and the share of it the workload gets."""

    index: int
    uuid: str
    gpu_milli: int  # 1000 = the whole card
    gpu_memory_mib: int
    # A MIG instance (profile and memory-slice start) on this card, as the engine placed it.
    mig_profile: str = ""
    mig_start: int | None = None


@dataclass(frozen=True, slots=True)
class MaterializeRequest:
    """Everything a backend needs to run one placed workload. Names are deterministic (idempotent create)."""

    workload_id: int
    name: str  # DNS-safe, unique per namespace, e.g. "cs-alice-7f3k" or "job-train-12-pod-3"
    kind: WorkloadKind
    tenant_slug: str
    image: str
    node_name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GpuBinding, ...] = ()
    gpu_model: str = ""
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    home_volume_gib: int = 0  # codespaces: a PVC kept across stop/start, deleted only on delete
    home_name: str = (
        ""  # stable name of that volume across the codespace's workloads ("" = per workload)
    )
    gang_name: str = ""
    gang_min_available: int = 0
    priority: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    # The placement this object makes real. A workload keeps its name across placements (requeue,
    # re-place), so releases and the orphan reconciler key on this, never on the workload alone.
    placement_id: int | None = None


@dataclass(frozen=True, slots=True)
class BackendObject:
    """One running object the cluster has for a workload (the orphan reconciler compares these with the
    active placements). `placement_id` is None for objects made before placements were recorded on
    them: those are matched by workload."""

    name: str
    workload_id: int
    placement_id: int | None


@dataclass(frozen=True, slots=True)
class StatusReport:
    """One observation of a workload's state in the cluster."""

    workload_id: int
    phase: ObservedPhase
    message: str = ""
    node_name: str = ""
    # Devices the cluster allocated, per GPU index of the placement: (index, "driver/pool/device").
    # Empty when the backend allocates nothing itself (HAMi, simulated) or has not allocated yet.
    allocated_devices: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class GpuInventory:
    index: int
    uuid: str
    model: str
    memory_mib: int
    numa_node: int = 0
    nvlink_group: int = 0
    healthy: bool = True
    # A static MIG layout (the operator's; Tessera never changes it): (profile, start) per instance.
    # Empty: no MIG, or a layout Tessera owns (dynamic MIG).
    mig_layout: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """A node as the cluster reports it (inventory sync upserts Node and Gpu rows from these)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_model: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[str, ...] = ()
    cordoned: bool = False
    gpus: tuple[GpuInventory, ...] = field(default_factory=tuple)


#: A MIG layout as backends see it: ``(profile, start)`` per instance, in start order.
MigLayout = tuple[tuple[str, int], ...]


class MigLayoutPhase(str, enum.Enum):
    """Where a card's MIG reconfiguration is on the cluster."""

    PENDING = "pending"  # asked for, not done yet
    READY = "ready"  # the card has the new layout
    FAILED = "failed"  # the cluster could not apply it (message says why)


@dataclass(frozen=True, slots=True)
class MigLayoutRequest:
    """One dynamic card's new MIG layout to apply (`scheduling.services.mig_reconfig`).

    `node_layouts` is the layout of every dynamic MIG card of the node after the change (index, layout):
    a node-level mechanism (NVIDIA's MIG manager applies one named config per node) writes them all, and
    the cards other than `gpu_index` keep the layout they have. `requested_at` is when Tessera started to
    apply it (the simulated backend's clock)."""

    reconfiguration_id: int
    node_name: str
    gpu_index: int
    gpu_uuid: str
    gpu_model: str
    old_layout: MigLayout
    new_layout: MigLayout
    node_layouts: tuple[tuple[int, MigLayout], ...]
    requested_at: datetime

    def reverted(self) -> MigLayoutRequest:
        """The request that puts the card back to its old layout (after a failure)."""
        return MigLayoutRequest(
            self.reconfiguration_id,
            self.node_name,
            self.gpu_index,
            self.gpu_uuid,
            self.gpu_model,
            self.new_layout,
            self.old_layout,
            tuple(
                (index, self.old_layout if index == self.gpu_index else layout)
                for index, layout in self.node_layouts
            ),
            self.requested_at,
        )


@dataclass(frozen=True, slots=True)
class MigLayoutStatus:
    phase: MigLayoutPhase
    message: str = ""


class BackendError(Exception):
    """A cluster call failed. `permanent=False` errors are retried by the task with backoff; permanent
    ones mark the workload FAILED with the message."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent


class Backend(Protocol):
    """What the scheduling service needs from a cluster. Every method is idempotent. A backend that
    can create many objects in one call also has `materialize_many` (`BatchMaterialize`), which
    `scheduling.services.reconcile.materialize_placements` uses instead of one call per placement."""

    name: str

    def materialize(self, request: MaterializeRequest) -> None:
        """Create (or find) the cluster objects for a placed workload. Create-or-get by name."""

    def release(
        self,
        workload_id: int,
        name: str,
        *,
        delete_home: bool,
        home_name: str = "",
        placement_id: int | None = None,
    ) -> None:
        """Remove the running object(s) of placement `placement_id` (an object of another placement of
        the same workload is kept; None: whatever the workload has); keep the home volume
        (`home_name`, or the one derived from `name`) unless `delete_home`. Missing is fine."""

    def signal_reclaim(
        self,
        workload_id: int,
        name: str,
        *,
        deadline: datetime | None,
        reason: str,
        placement_id: int | None = None,
    ) -> bool:
        """Polite reclaim: tell the running object of placement `placement_id` that it will be stopped
        at `deadline` (None: the notice was cancelled, clear it) and why, so it can checkpoint.
        Returns False when the cluster has no such object (nothing to tell)."""

    def list_objects(self) -> Sequence[BackendObject]:
        """Every running object Tessera made that the cluster has now (the orphan reconciler)."""

    def sync_status(self, workload_ids: Iterable[int]) -> Sequence[StatusReport]:
        """Report the observed phase of the given materialized workloads."""

    def sync_inventory(self) -> Sequence[NodeInventory]:
        """List the nodes and GPUs the cluster has now."""

    def apply_mig_layout(self, request: MigLayoutRequest) -> None:
        """Ask the cluster to give the card `request.new_layout` (idempotent: asking again for what was
        asked changes nothing). A BackendError(permanent=True) refuses it (the reconfiguration fails)."""

    def mig_layout_status(self, request: MigLayoutRequest) -> MigLayoutStatus:
        """Whether the card has the layout `request` asked for yet."""


class BatchMaterialize(Protocol):
    def materialize_many(self, requests: Sequence[MaterializeRequest]) -> dict[int, BackendError]:
        """`Backend.materialize` of every request in one call; the error per workload id of those it
        refused (the others exist)."""
