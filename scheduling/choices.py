from django.db import models


class WorkloadKind(models.TextChoices):
    CODESPACE = "codespace", "Codespace"
    JOB_POD = "job_pod", "Job pod"


class WorkloadState(models.TextChoices):
    """PENDING → PLACED → RUNNING → SUCCEEDED | FAILED | RELEASED.

    PENDING: waiting for admission or capacity (pending_reason says why). PLACED: a placement is committed
    and the backend is materializing it. RUNNING: the backend reports it running. RELEASED: stopped,
    cancelled or reclaimed; it holds nothing. PLACED and RUNNING hold an active Placement.
    """

    PENDING = "pending", "Pending"
    PLACED = "placed", "Placed"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    RELEASED = "released", "Released"


ACTIVE_STATES = (WorkloadState.PLACED, WorkloadState.RUNNING)
TERMINAL_STATES = (WorkloadState.SUCCEEDED, WorkloadState.FAILED, WorkloadState.RELEASED)


class TopologyPolicy(models.TextChoices):
    NONE = "none", "None"
    PREFERRED = "preferred", "Preferred (same NUMA node / NVLink group when possible)"
    RESTRICTED = "restricted", "Restricted (same NUMA node / NVLink group or wait)"


class GangTopologyMode(models.TextChoices):
    """How strictly a job's pods must share one topology domain (core.placement.topology)."""

    REQUIRED = "required", "Required (one domain of the level, or wait)"
    PREFERRED = "preferred", "Preferred (the tightest domain that fits, else anywhere)"


class UtilizationProfile(models.TextChoices):
    """How the simulated cluster makes up GPU utilization for a workload."""

    DEVELOPMENT = "development", "Developer environment (mostly idle, bursts)"
    INFERENCE = "inference", "Inference (steady)"
    TRAINING = "training", "Training (high)"


class GangState(models.TextChoices):
    WAITING = "waiting", "Waiting"
    PLACED = "placed", "Placed"
    RUNNING = "running", "Running"
    TIMED_OUT = "timed_out", "Timed out"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class DefragPlanState(models.TextChoices):
    """PREVIEWED → APPLYING → APPLIED | FAILED; PREVIEWED → EXPIRED (too old, or the cluster moved on).

    Every transition is a compare-and-set on the stored state (scheduling.services.defrag)."""

    PREVIEWED = "previewed", "Previewed"
    APPLYING = "applying", "Applying"
    APPLIED = "applied", "Applied"
    FAILED = "failed", "Failed"
    EXPIRED = "expired", "Expired"


DEFRAG_FINAL_STATES = (DefragPlanState.APPLIED, DefragPlanState.FAILED, DefragPlanState.EXPIRED)


class DefragTrigger(models.TextChoices):
    OPERATOR = "operator", "Operator (preview, then apply)"
    SCHEDULED = "scheduled", "Scheduled (maintenance window or waiting demand)"


class MigReconfigurationState(models.TextChoices):
    """planned → applying → ready | failed (and planned → cancelled): the life of one dynamic card's MIG
    reconfiguration. The values and allowed transitions are the engine's
    (`core.placement.mig.ReconfigurationState`, `RECONFIGURATION_TRANSITIONS`): one machine."""

    PLANNED = "planned", "Planned"
    APPLYING = "applying", "Applying"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


#: A reconfiguration in one of these states holds its card (no other change, no other work on it).
ACTIVE_RECONFIGURATION_STATES = (MigReconfigurationState.PLANNED, MigReconfigurationState.APPLYING)
