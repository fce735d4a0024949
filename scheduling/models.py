"""Inventory (Node, Gpu), the schedulable unit (Workload, Gang) and what was decided (Placement)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from core.units import MILLI_PER_GPU
from portal.models import Tenant
from quotas.models import Quota, QuotaGroup
from scheduling.choices import (
    ACTIVE_RECONFIGURATION_STATES,
    ACTIVE_STATES,
    DefragPlanState,
    DefragTrigger,
    GangState,
    GangTopologyMode,
    MigReconfigurationState,
    TopologyPolicy,
    UtilizationProfile,
    WorkloadKind,
    WorkloadState,
)
from scheduling.topology import level_errors


class Node(models.Model):
    """A cluster node. `labels` select its pool (QuotaGroup.node_selector); cordoned nodes take no new work;
    an unhealthy node (simulated failure) fails its workloads."""

    name = models.CharField(max_length=253, unique=True)
    pool = models.CharField(max_length=63, blank=True, db_index=True)
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    cpu_milli = models.PositiveBigIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    gpu_model = models.CharField(max_length=63, blank=True)
    cordoned = models.BooleanField(default=False)
    healthy = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Gpu(models.Model):
    """One physical GPU: 1000 milli of compute and `memory_mib` of memory, shareable in slices."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, unique=True)
    model = models.CharField(max_length=63)
    memory_mib = models.PositiveIntegerField()
    numa_node = models.PositiveSmallIntegerField(default=0)
    nvlink_group = models.PositiveSmallIntegerField(default=0)
    healthy = models.BooleanField(default=True)
    mig_layout = models.JSONField(
        default=list,
        blank=True,
        help_text="A static MIG layout the operator fixed, as inventory reports it: [[profile, start], "
        "...]; empty = Tessera owns the layout (dynamic MIG). On a `mig_dynamic` card: the layout it has now, "
        "written by Tessera when a reconfiguration is ready",
    )
    mig_dynamic = models.BooleanField(
        default=False,
        help_text="Tessera may reconfigure this card's MIG layout while it is empty (a planned step applied "
        "by the backend: the MIG manager's node label on Kubernetes); set by an operator",
    )

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="uniq_gpu_index_on_node")
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"


class Gang(models.Model):
    """A distributed job: its member workloads are placed all together (at least `min_available`) or not
    at all. A gang that cannot complete before `deadline_at` releases what it held and says why."""

    name = models.CharField(max_length=63)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="gangs")
    quota = models.ForeignKey(Quota, on_delete=models.PROTECT, related_name="gangs")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="gangs",
    )
    min_available = models.PositiveIntegerField()
    timeout_seconds = models.PositiveIntegerField(default=600)
    topology_level = models.CharField(
        max_length=32,
        blank=True,
        default="",
        help_text="All pods in one domain of this topology level of the pool (rack); blank = anywhere",
    )
    topology_mode = models.CharField(
        max_length=10, choices=GangTopologyMode.choices, default=GangTopologyMode.REQUIRED
    )
    state = models.CharField(max_length=20, choices=GangState.choices, default=GangState.WAITING)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="uniq_gang_name_in_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class Workload(models.Model):
    """The schedulable unit: a codespace, or one pod of a job. Charged to `quota` (GPU side when it uses a
    GPU, CPU side otherwise). `pending_reason` and `queue_position` tell a waiting user why and where."""

    # indexed by (tenant, state) below
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="workloads", db_index=False
    )
    quota = models.ForeignKey(Quota, on_delete=models.PROTECT, related_name="workloads")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="workloads",
    )
    kind = models.CharField(max_length=20, choices=WorkloadKind.choices)
    name = models.CharField(max_length=63)
    gang = models.ForeignKey(
        Gang, null=True, blank=True, on_delete=models.CASCADE, related_name="members"
    )
    image = models.CharField(max_length=255, blank=True)
    home_volume = models.CharField(
        max_length=63,
        blank=True,
        help_text="Stable name of a persistent home volume that outlives this workload (codespaces)",
    )
    home_volume_gib = models.PositiveIntegerField(default=0)
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveIntegerField()
    gpu_count = models.PositiveSmallIntegerField(default=0)
    gpu_milli = models.PositiveIntegerField(default=0, help_text="Per GPU; 1000 = whole card")
    gpu_memory_mib = models.PositiveIntegerField(default=0, help_text="Per GPU")
    mig_profile = models.CharField(
        max_length=16,
        blank=True,
        default="",
        help_text="A MIG profile (1g.10gb) on a MIG pool: one GPU instance, counted as its GPU-equivalent",
    )
    whole_card_memory_mib = models.PositiveIntegerField(
        default=0,
        help_text="Whole cards only, per GPU: the memory charged to the quota (the card held once "
        "placed, the largest card it may be placed on while pending)",
    )
    gpu_models = models.JSONField(
        default=list, blank=True, help_text="Allowed GPU models; empty = any"
    )
    node_labels = models.JSONField(default=dict, blank=True, help_text="Required node labels")
    topology = models.CharField(
        max_length=20, choices=TopologyPolicy.choices, default=TopologyPolicy.NONE
    )
    priority = models.IntegerField(default=0)
    preemptible = models.BooleanField(default=True)
    movable = models.BooleanField(
        default=True,
        help_text="Defragmentation may move it (stop and restart elsewhere); false = exempt",
    )
    profile = models.CharField(
        max_length=20, choices=UtilizationProfile.choices, default=UtilizationProfile.DEVELOPMENT
    )
    state = models.CharField(
        max_length=20, choices=WorkloadState.choices, default=WorkloadState.PENDING
    )
    pending_reason = models.TextField(blank=True)
    pending_code = models.CharField(max_length=40, blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)
    placed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "quota"], name="workload_state_quota"),
            models.Index(fields=["tenant", "state"], name="workload_tenant_state"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def uses_gpu(self) -> bool:
        return self.gpu_count > 0

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES


class Placement(models.Model):
    """Where a workload runs: a node, its CPU and memory, and (PlacementGpu) the GPU shares.

    At most one active (unreleased) placement per workload — a database constraint, so that no race
    between two scheduling cycles can ever place a workload twice.
    """

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="placements")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="placements")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="placements")
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveIntegerField()
    gpu_milli_total = models.PositiveIntegerField(default=0, help_text="Sum over its GPUs")
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)
    mig_reconfiguration = models.ForeignKey(
        "MigReconfiguration",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="placements",
        help_text="The card's MIG reconfiguration this placement waits for (its instance is created by "
        "it); the workload starts when it is ready",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workload"],
                condition=Q(released_at__isnull=True),
                name="one_active_placement_per_workload",
            )
        ]
        indexes = [models.Index(fields=["node", "released_at"], name="placement_node_active")]

    def __str__(self) -> str:
        return f"{self.workload} on {self.node}"


class MigReconfiguration(models.Model):
    """One planned change of a dynamic MIG card's layout (`old_layout` → `new_layout`, ``[[profile,
    start], ...]``), applied by the backend before the workloads placed on its new instances start.

    planned → applying → ready | failed (planned → cancelled): `state` is the one source of truth,
    changed only by `scheduling.services.mig_reconfig` (compare-and-set on the state); every transition
    is appended to `transitions` with its time and reason (the audit trail). A reconfiguration still
    applying at `deadline_at` fails (timed out)."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="mig_reconfigurations")
    state = models.CharField(
        max_length=16,
        choices=MigReconfigurationState.choices,
        default=MigReconfigurationState.PLANNED,
        db_index=True,
    )
    old_layout = models.JSONField(default=list, blank=True)
    new_layout = models.JSONField(default=list, blank=True)
    reason = models.CharField(max_length=500, blank=True, default="")
    backend_ref = models.CharField(
        max_length=253,
        blank=True,
        default="",
        help_text="What the backend applied (the MIG manager's config name on Kubernetes)",
    )
    transitions = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    applying_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu"],
                condition=Q(state__in=ACTIVE_RECONFIGURATION_STATES),
                name="one_active_mig_reconfiguration_per_gpu",
            )
        ]

    def __str__(self) -> str:
        return f"{self.gpu}: {self.state}"


class PlacementGpu(models.Model):
    """The share of one GPU that a placement holds."""

    placement = models.ForeignKey(Placement, on_delete=models.CASCADE, related_name="gpu_shares")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="shares")
    gpu_milli = models.PositiveIntegerField()
    gpu_memory_mib = models.PositiveIntegerField()
    mig_profile = models.CharField(max_length=16, blank=True, default="")
    mig_start = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Memory-slice position of the MIG instance (0-7)"
    )
    allocated_device = models.CharField(
        max_length=320,
        blank=True,
        default="",
        db_default="",  # the cycle's bulk INSERT (PostgreSQL) does not name it
        help_text="The device the cluster allocated for this share, driver/pool/device (dra mode)",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["placement", "gpu"], name="uniq_gpu_in_placement"),
            models.CheckConstraint(
                condition=Q(gpu_milli__gt=0, gpu_milli__lte=MILLI_PER_GPU),
                name="gpu_share_milli_in_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu}: {self.gpu_milli}m / {self.gpu_memory_mib} MiB"


class Reservation(models.Model):
    """CPU and memory on a GPU node kept for GPU work: CPU-only workloads may not use it, so they cannot
    strand the node's GPUs."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="reservation")
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    reason = models.CharField(max_length=200, default="kept for GPU work")

    def __str__(self) -> str:
        return f"{self.node}: {self.cpu_milli}m CPU, {self.memory_mib} MiB kept for GPU work"


class Shard(models.Model):
    """Scheduling state of one quota group (a shard). `version` increments on every change to its
    inventory or placements, so a worker's cached engine snapshot knows when it is stale."""

    group = models.OneToOneField(QuotaGroup, on_delete=models.CASCADE, related_name="shard")
    version = models.PositiveBigIntegerField(default=0)
    last_cycle_at = models.DateTimeField(null=True, blank=True)
    last_cycle_ms = models.FloatField(null=True, blank=True)
    last_cycle_placed = models.PositiveIntegerField(default=0)
    topology_levels = models.JSONField(
        default=list,
        blank=True,
        help_text='The pool\'s cross-node topology, widest first: [["rack", "tessera.io/topology-rack"], '
        '["nvlink", "nvidia.com/gpu.clique"]]; empty = TESSERA_TOPOLOGY_LEVELS',
    )

    def __str__(self) -> str:
        return f"shard {self.group.name} v{self.version}"

    def clean(self) -> None:
        if errors := level_errors(self.topology_levels):
            raise ValidationError({"topology_levels": errors})


class SimulatedPod(models.Model):
    """What the simulated cluster runs: one row per materialized workload (the simulated backend's state,
    shared by every worker process). It reports RUNNING once `running_after` has passed, FAILED after a
    simulated GPU or node failure, and MISSING once released."""

    workload_id = models.BigIntegerField(unique=True)
    placement_id = models.BigIntegerField(
        null=True, blank=True, help_text="The placement it runs (null: made before they were kept)"
    )
    name = models.CharField(max_length=253)
    node_name = models.CharField(max_length=253)
    gpu_uuids = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    running_after = models.DateTimeField()
    failed = models.BooleanField(default=False)
    message = models.TextField(blank=True)
    reclaim_signal = models.JSONField(
        null=True,
        blank=True,
        help_text="Polite reclaim: the notice the workload was signalled (deadline, reason).",
    )

    class Meta:
        ordering = ["workload_id"]

    def __str__(self) -> str:
        return f"simulated pod {self.name} on {self.node_name}"


class InvariantAuditRun(models.Model):
    """One run of the invariant auditor (scheduling.services.audit): per invariant the number of
    violating rows (`counts`; an invariant missing from it was not checked) and the first
    TESSERA_AUDIT_MAX_FINDINGS of them (`findings`); `errors` names invariants whose query failed. The operators' audit page and `/metrics` read the
    latest run; older runs are pruned."""

    started_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField()
    violations = models.PositiveIntegerField(default=0)
    counts = models.JSONField(default=dict)
    errors = models.JSONField(default=dict, blank=True)
    findings = models.JSONField(default=dict)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"audit {self.started_at:%Y-%m-%d %H:%M:%S}: {self.violations} violations"


class DefragPlan(models.Model):
    """One defragmentation plan of a pool (scheduling.services.defrag): the moves the engine chose, what
    they unlock and cost, who previewed and who applied it. A plan is data: previewed first, applied
    once (compare-and-set on `state`); `result` is the answer of the apply, returned again on a retry.
    Kept as the audit trail of every move defragmentation made."""

    group = models.ForeignKey(QuotaGroup, on_delete=models.CASCADE, related_name="defrag_plans")
    state = models.CharField(
        max_length=16, choices=DefragPlanState.choices, default=DefragPlanState.PREVIEWED
    )
    trigger = models.CharField(
        max_length=16, choices=DefragTrigger.choices, default=DefragTrigger.OPERATOR
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    applied_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    shard_version = models.PositiveBigIntegerField(default=0)
    value = models.CharField(max_length=500, help_text="What the plan frees, in one sentence")
    freed_whole_gpus = models.PositiveIntegerField(default=0)
    freed_whole_nodes = models.PositiveIntegerField(default=0)
    cost_seconds = models.PositiveIntegerField(default=0)
    unlocks = models.JSONField(
        default=list, blank=True, help_text="The waiting workloads the moves free capacity for"
    )
    considered = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the plan looked at, why workloads stayed and what the planner refused",
    )
    result = models.JSONField(default=dict, blank=True)
    error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "expires_at"], name="defragplan_state_expiry")]

    def __str__(self) -> str:
        return f"defrag plan {self.pk} of {self.group_id}: {self.state}"


class DefragMove(models.Model):
    """One move of a plan: the workload, where it was, where it goes, its cost and why (the sentence its
    owner reads)."""

    plan = models.ForeignKey(DefragPlan, on_delete=models.CASCADE, related_name="moves")
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="defrag_moves")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    placement_id = models.PositiveBigIntegerField(help_text="The placement it held when planned")
    from_node = models.CharField(max_length=253)
    from_gpus = models.JSONField(default=list)
    to_node = models.CharField(max_length=253)
    to_gpus = models.JSONField(default=list)
    gpu_milli = models.PositiveIntegerField(default=0)
    gpu_memory_mib = models.PositiveIntegerField(default=0)
    target_gpu_memory_mib = models.PositiveIntegerField(default=0)
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveIntegerField()
    cost_seconds = models.PositiveIntegerField(default=0)
    running_seconds = models.PositiveBigIntegerField(default=0)
    reason = models.CharField(max_length=500)
    moved_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["plan", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["plan", "workload"], name="uniq_workload_in_defrag_plan"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workload_id}: {self.from_node} -> {self.to_node}"
