"""Elastic quota tree: QuotaGroup (a pool of nodes, never borrowing from another) → Quota (a tenant's leaf).

Every change goes through `quotas.services` (validated, locked, compare-and-set on `version`, audited in
QuotaChange). The runtime algorithm and the capacity definitions are in docs/quotas.md.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from portal.models import Tenant, dns_label_validator
from quotas.fairness import MAX_HALF_LIFE_HOURS
from quotas.resources import DIMENSIONS, Resources, Side
from quotas.sharing import MAX_TIMESLICE_REPLICAS, Sharing, SharingMode, sharing_sentence

MAX_MIN_RUNTIME_SECONDS = 7 * 24 * 3600
"""The longest minimum runtime before preemption a group may set (a week)."""

MAX_RECLAIM_NOTICE_SECONDS = 3600
"""The longest notice polite reclaim gives before it stops borrowed work (an hour)."""

# Model field name of a bound: f"{side}_{bound}_{dimension}", e.g. gpu_min_gpu_milli, cpu_max_memory_mib.
BOUNDS = ("min", "max")


def bound_field(side: Side | str, bound: str, dimension: str) -> str:
    return f"{Side(side).value}_{bound}_{dimension}"


RESOURCE_FIELDS: tuple[str, ...] = tuple(
    bound_field(side, bound, dimension)
    for side in (Side.GPU, Side.CPU)
    for dimension in side.dimensions
    for bound in BOUNDS
)
"""The twelve min/max fields of a Quota (8 on the GPU side, 4 on the CPU side)."""

EDITABLE_QUOTA_FIELDS: tuple[str, ...] = (*RESOURCE_FIELDS, "shared_weight", "lend_idle_min")
EDITABLE_GROUP_FIELDS: tuple[str, ...] = (
    "description",
    "node_selector",
    "allow_overcommitted_min",
    "fair_share_half_life_hours",
    "min_runtime_seconds",
    "reclaim_notice_seconds",
    "sharing_mode",
    "mig_profiles",
    "timeslice_replicas",
)


class QuotaGroup(models.Model):
    """A pool of nodes selected by labels. Its capacity is the schedulable capacity of the matching nodes
    (unhealthy GPUs excluded). Groups never borrow from each other; each is one scheduling shard."""

    name = models.SlugField(max_length=63, unique=True, validators=[dns_label_validator])
    description = models.TextField(blank=True)
    node_selector = models.JSONField(
        default=dict, blank=True, help_text='Node labels, e.g. {"pool": "a100"}'
    )
    allow_overcommitted_min = models.BooleanField(
        default=False, help_text="Allow the sum of leaf mins to exceed the group's capacity."
    )
    fair_share_half_life_hours = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_HALF_LIFE_HOURS)],
        help_text="Decayed fair share: half-life of past GPU-hour usage in hours (empty = off).",
    )
    min_runtime_seconds = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(MAX_MIN_RUNTIME_SECONDS)],
        help_text="Minimum runtime before preemption: reclaim never stops work younger than this.",
    )
    reclaim_notice_seconds = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(MAX_RECLAIM_NOTICE_SECONDS)],
        help_text="Polite reclaim: seconds of notice borrowed work gets before it is stopped "
        "(0 = stopped at once).",
    )
    sharing_mode = models.CharField(
        max_length=16,
        choices=SharingMode.choices,
        default=SharingMode.SLICE,
        help_text="How the pool's GPUs are shared (quotas.sharing).",
    )
    mig_profiles = models.JSONField(
        default=list,
        blank=True,
        help_text='MIG pools: the profiles offered, e.g. ["1g.10gb", "3g.40gb"].',
    )
    timeslice_replicas = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_TIMESLICE_REPLICAS)],
        help_text="Time-sliced pools: replicas per GPU (no memory isolation).",
    )
    version = models.PositiveIntegerField(
        default=1, help_text="Incremented on every change (optimistic concurrency)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def snapshot_fields(self) -> dict[str, Any]:
        """The editable state, as stored in QuotaChange.before/after."""
        return {
            "name": self.name,
            "description": self.description,
            "node_selector": self.node_selector,
            "allow_overcommitted_min": self.allow_overcommitted_min,
            "fair_share_half_life_hours": self.fair_share_half_life_hours,
            "min_runtime_seconds": self.min_runtime_seconds,
            "reclaim_notice_seconds": self.reclaim_notice_seconds,
            "sharing_mode": self.sharing_mode,
            "mig_profiles": list(self.mig_profiles or []),
            "timeslice_replicas": self.timeslice_replicas,
        }

    @property
    def sharing(self) -> Sharing:
        """The pool's sharing mode as a value (see quotas.sharing)."""
        return Sharing(self.sharing_mode, tuple(self.mig_profiles or ()), self.timeslice_replicas)

    @property
    def sharing_summary(self) -> str:
        """The sharing mode in one sentence for pages."""
        return sharing_sentence(self.sharing)


class Quota(models.Model):
    """A tenant's leaf quota in one group (a tenant holds at most one per group).

    Per side a guaranteed `min` and a burst `max` in each dimension: the GPU side (work that uses a GPU)
    limits GPU milli, GPU memory, CPU and memory; the CPU side (CPU-only work) limits CPU and memory. Idle
    capacity is lent to siblings in proportion to `shared_weight` (empty = the quota's max, per dimension,
    as in Koordinator); `lend_idle_min=False` keeps the unused min reserved.
    """

    group = models.ForeignKey(QuotaGroup, on_delete=models.PROTECT, related_name="quotas")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quotas")
    name = models.SlugField(max_length=63, validators=[dns_label_validator])

    gpu_min_gpu_milli = models.PositiveBigIntegerField(
        default=0, verbose_name="GPU side min GPU milli"
    )
    gpu_max_gpu_milli = models.PositiveBigIntegerField(
        default=0, verbose_name="GPU side max GPU milli"
    )
    gpu_min_gpu_memory_mib = models.PositiveBigIntegerField(
        default=0, verbose_name="GPU side min GPU memory MiB"
    )
    gpu_max_gpu_memory_mib = models.PositiveBigIntegerField(
        default=0, verbose_name="GPU side max GPU memory MiB"
    )
    gpu_min_cpu_milli = models.PositiveBigIntegerField(
        default=0, verbose_name="GPU side min CPU milli"
    )
    gpu_max_cpu_milli = models.PositiveBigIntegerField(
        default=0, verbose_name="GPU side max CPU milli"
    )
    gpu_min_memory_mib = models.PositiveBigIntegerField(
        default=0, verbose_name="GPU side min memory MiB"
    )
    gpu_max_memory_mib = models.PositiveBigIntegerField(
        default=0, verbose_name="GPU side max memory MiB"
    )
    cpu_min_cpu_milli = models.PositiveBigIntegerField(
        default=0, verbose_name="CPU side min CPU milli"
    )
    cpu_max_cpu_milli = models.PositiveBigIntegerField(
        default=0, verbose_name="CPU side max CPU milli"
    )
    cpu_min_memory_mib = models.PositiveBigIntegerField(
        default=0, verbose_name="CPU side min memory MiB"
    )
    cpu_max_memory_mib = models.PositiveBigIntegerField(
        default=0, verbose_name="CPU side max memory MiB"
    )
    shared_weight = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="Relative share of idle capacity; empty = this quota's max in each dimension.",
    )
    lend_idle_min = models.BooleanField(
        default=True, help_text="Lend the unused part of the min to sibling quotas."
    )
    max_gpus_per_user = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(10_000)],
        help_text="The most GPUs one person of the team may hold at once (empty = no cap).",
    )
    equal_borrowing_share = models.BooleanField(
        default=False,
        help_text="Share the team's borrowed GPUs equally among its active users (those with "
        "running or waiting work).",
    )
    checkpoint_webhook_url = models.URLField(
        max_length=500,
        blank=True,
        help_text="Polite reclaim: POSTed (HMAC-signed) when the team's work gets a reclaim notice.",
    )
    version = models.PositiveIntegerField(
        default=1, help_text="Incremented on every change (optimistic concurrency)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["group__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["group", "name"], name="uniq_quota_name_in_group"),
            models.UniqueConstraint(fields=["group", "tenant"], name="uniq_quota_tenant_in_group"),
        ]

    def __str__(self) -> str:
        return f"{self.group.name}/{self.name}"

    def bound(self, side: Side | str, bound: str) -> Resources:
        """The `min` or `max` of one side as a Resources vector (GPU dimensions are 0 on the CPU side)."""
        side = Side(side)
        return Resources(
            **{
                d: int(getattr(self, bound_field(side, bound, d)) or 0)
                if d in side.dimensions
                else 0
                for d in DIMENSIONS
            }
        )

    def min_of(self, side: Side | str) -> Resources:
        return self.bound(side, "min")

    def max_of(self, side: Side | str) -> Resources:
        return self.bound(side, "max")

    def weight_of(self, side: Side | str) -> Resources:
        """The shared weight per dimension: `shared_weight` in every dimension, or the max when empty."""
        if self.shared_weight is None:
            return self.max_of(side)
        side = Side(side)
        return Resources(**{d: int(self.shared_weight) for d in side.dimensions})

    def snapshot_fields(self) -> dict[str, Any]:
        """The editable state, as stored in QuotaChange.before/after."""
        data: dict[str, Any] = {"name": self.name, "tenant": self.tenant.slug}
        data.update({name: getattr(self, name) for name in EDITABLE_QUOTA_FIELDS})
        return data


class ChangeAction(models.TextChoices):
    CREATED = "created", "Created"
    UPDATED = "updated", "Updated"
    DELETED = "deleted", "Deleted"


class QuotaChange(models.Model):
    """Audit row: one change of a quota (or of a group, when `quota` is empty and `subject` is "group"):
    who, when, the state before and after (JSON of the editable fields), the new version and a note."""

    group = models.ForeignKey(
        QuotaGroup, null=True, blank=True, on_delete=models.SET_NULL, related_name="changes"
    )
    quota = models.ForeignKey(
        Quota, null=True, blank=True, on_delete=models.SET_NULL, related_name="changes"
    )
    subject = models.CharField(max_length=10, default="quota")
    subject_name = models.CharField(
        max_length=130, help_text="group/quota at the time of the change"
    )
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="quota_changes"
    )
    action = models.CharField(max_length=10, choices=ChangeAction.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="quota_changes",
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    note = models.CharField(max_length=500, blank=True)
    warnings = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["quota", "-created_at"], name="quotachange_quota_recent")]

    def __str__(self) -> str:
        return f"{self.subject_name} {self.action} v{self.version}"

    def changed_fields(self) -> list[tuple[str, Any, Any]]:
        """(field, before, after) for every field whose value differs."""
        before = self.before or {}
        after = self.after or {}
        keys = list(dict.fromkeys([*before.keys(), *after.keys()]))
        return [(k, before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)]


# ------------------------------------------------------------------------ fairness over time (issue 17)

MAX_BUDGET_GPU_HOURS = 10_000_000
"""The largest budget or top-up, in GPU-hours (or price GPU-hours)."""


class BudgetPeriod(models.TextChoices):
    WEEK = "week", "Week"
    MONTH = "month", "Month"


class BudgetWindow(models.TextChoices):
    CALENDAR = "calendar", "Calendar (resets Monday 00:00 UTC / the 1st)"
    ROLLING = "rolling", "Rolling (the last 7 / 30 days)"


class BudgetWeighting(models.TextChoices):
    HOURS = "hours", "GPU-hours"
    PRICE = "price", "GPU-hours weighted by model price"


class GpuHourBudget(models.Model):
    """A cap on a quota's GPU-hours per period. At 80 % and 100 % the team admins get a notice; at 100 %
    new borrowing stops (work within min still starts, unless `hard`). Operators grant top-ups
    (`BudgetTopUp`, audited) that raise the limit of the period they are granted in."""

    quota = models.ForeignKey(Quota, on_delete=models.CASCADE, related_name="budgets")
    period = models.CharField(
        max_length=10, choices=BudgetPeriod.choices, default=BudgetPeriod.WEEK
    )
    window = models.CharField(
        max_length=10, choices=BudgetWindow.choices, default=BudgetWindow.CALENDAR
    )
    gpu_model = models.CharField(
        max_length=63,
        blank=True,
        help_text="Only this GPU model's hours count (empty = every model).",
    )
    weighting = models.CharField(
        max_length=10, choices=BudgetWeighting.choices, default=BudgetWeighting.HOURS
    )
    limit_gpu_hours = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        validators=[MinValueValidator(0), MaxValueValidator(MAX_BUDGET_GPU_HOURS)],
    )
    hard = models.BooleanField(
        default=False, help_text="At 100 % nothing new starts, not even work within min."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["quota_id", "id"]

    def __str__(self) -> str:
        return f"{self.quota_id}: {self.limit_gpu_hours} per {self.period}"


class BudgetTopUp(models.Model):
    """GPU-hours an operator added to a budget for the period starting at `period_start`."""

    budget = models.ForeignKey(GpuHourBudget, on_delete=models.CASCADE, related_name="top_ups")
    period_start = models.DateTimeField()
    gpu_hours = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        validators=[MinValueValidator(0), MaxValueValidator(MAX_BUDGET_GPU_HOURS)],
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]


class BudgetAlert(models.Model):
    """One notice sent for one budget, period and threshold (80 or 100): sent once per period."""

    budget = models.ForeignKey(GpuHourBudget, on_delete=models.CASCADE, related_name="alerts")
    period_start = models.DateTimeField()
    threshold = models.PositiveSmallIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_start", "threshold"], name="uniq_budget_alert"
            )
        ]


class QuotaNotice(models.Model):
    """A message to a team's admins about its quota (budget thresholds, loans): shown on the quota page
    and in the API, and mailed to the tenant admins that have an e-mail address."""

    quota = models.ForeignKey(Quota, on_delete=models.CASCADE, related_name="notices")
    kind = models.CharField(max_length=30)
    message = models.CharField(max_length=1000)
    recipients = models.JSONField(default=list, blank=True, help_text="usernames told")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["quota", "-created_at"], name="quotanotice_recent")]


class LoanState(models.TextChoices):
    REQUESTED = "requested", "Requested"
    APPROVED = "approved", "Approved"
    DECLINED = "declined", "Declined"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


LOAN_TRANSITIONS: dict[str, frozenset[str]] = {
    LoanState.REQUESTED: frozenset(
        {LoanState.APPROVED, LoanState.DECLINED, LoanState.CANCELLED, LoanState.EXPIRED}
    ),
    LoanState.APPROVED: frozenset({LoanState.EXPIRED}),
    LoanState.DECLINED: frozenset(),
    LoanState.CANCELLED: frozenset(),
    LoanState.EXPIRED: frozenset(),
}
"""The loan state machine: every allowed (from → to). Terminal states allow nothing."""

MAX_LOAN_GPUS = 10_000
MAX_LOAN_DAYS = 90


class QuotaLoan(models.Model):
    """N GPUs of min lent by one quota to a sibling (or by the operators, from the group's capacity no
    quota's min promises: `lender` empty) for [starts_at, ends_at). While APPROVED and inside
    its window it moves that much GPU-side min (and max) from lender to borrower in every snapshot
    (quotas.loans.active_loan_effects); it expires by itself at `ends_at`."""

    group = models.ForeignKey(QuotaGroup, on_delete=models.CASCADE, related_name="loans")
    lender = models.ForeignKey(
        Quota,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="loans_out",
        help_text="The quota that lends (empty: the operators lend the group's unassigned capacity).",
    )
    borrower = models.ForeignKey(Quota, on_delete=models.CASCADE, related_name="loans_in")
    gpus = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(MAX_LOAN_GPUS)]
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    state = models.CharField(
        max_length=10, choices=LoanState.choices, default=LoanState.REQUESTED, db_index=True
    )
    reason = models.CharField(max_length=500, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.CharField(max_length=500, blank=True)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")), name="loan_window_positive"
            ),
            models.CheckConstraint(
                condition=~models.Q(lender=models.F("borrower")), name="loan_not_to_itself"
            ),
        ]

    def __str__(self) -> str:
        return f"loan {self.pk}: {self.gpus} GPUs {self.lender_id} -> {self.borrower_id}"


# ------------------------------------------------------------------------ polite reclaim (issue 17)


class ReclaimNoticeState(models.TextChoices):
    NOTICED = "noticed", "Noticed"
    EXECUTED = "executed", "Executed"
    CANCELLED = "cancelled", "Cancelled"


RECLAIM_NOTICE_TRANSITIONS: dict[str, frozenset[str]] = {
    ReclaimNoticeState.NOTICED: frozenset(
        {ReclaimNoticeState.EXECUTED, ReclaimNoticeState.CANCELLED}
    ),
    ReclaimNoticeState.EXECUTED: frozenset(),
    ReclaimNoticeState.CANCELLED: frozenset(),
}
"""The notice state machine: every allowed (from → to). Terminal states allow nothing."""


class DeliveryState(models.TextChoices):
    """How a notice's signal to the workload, or its checkpoint webhook call, went."""

    NONE = "none", "Not configured"
    PENDING = "pending", "Pending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class ReclaimNotice(models.Model):
    """Polite reclaim: one borrowed workload told it will be stopped at `deadline` so that a sibling
    quota gets back its min. The only record of a notice (quotas.reclaim_notices): NOTICED → EXECUTED
    (stopped at the deadline) or CANCELLED (the pressure went away), each a compare-and-set.

    The workload lives in the scheduling app (a layer above), so it is named by id and copied fields."""

    group = models.ForeignKey(QuotaGroup, on_delete=models.CASCADE, related_name="reclaim_notices")
    quota = models.ForeignKey(
        Quota,
        on_delete=models.CASCADE,
        related_name="reclaim_notices",
        help_text="The quota whose borrowed work is reclaimed.",
    )
    claimant_quota = models.ForeignKey(
        Quota,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reclaim_claims",
        help_text="The quota that takes its capacity back.",
    )
    claimant_workload_ids = models.JSONField(default=list, blank=True)
    workload_id = models.BigIntegerField(db_index=True)
    workload_name = models.CharField(max_length=253)
    workload_kind = models.CharField(max_length=20)
    owner_username = models.CharField(max_length=150, blank=True)
    gang_id = models.BigIntegerField(null=True, blank=True)
    victim_name = models.CharField(max_length=253, help_text="The victim as the plan names it.")
    reason = models.CharField(max_length=1000)
    state = models.CharField(
        max_length=10, choices=ReclaimNoticeState.choices, default=ReclaimNoticeState.NOTICED
    )
    noticed_at = models.DateTimeField()
    deadline = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    close_note = models.CharField(max_length=500, blank=True)
    signal_state = models.CharField(
        max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    signal_detail = models.CharField(max_length=500, blank=True)
    hook_state = models.CharField(
        max_length=10, choices=DeliveryState.choices, default=DeliveryState.NONE
    )
    hook_detail = models.CharField(max_length=500, blank=True)
    hook_called_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["-noticed_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workload_id"],
                condition=models.Q(state="noticed"),
                name="one_live_reclaim_notice_per_workload",
            ),
            models.CheckConstraint(
                condition=models.Q(deadline__gte=models.F("noticed_at")),
                name="reclaim_notice_deadline_after_notice",
            ),
        ]
        indexes = [
            models.Index(fields=["group", "state", "deadline"], name="reclaimnotice_live"),
            models.Index(fields=["quota", "-noticed_at"], name="reclaimnotice_quota_recent"),
        ]

    def __str__(self) -> str:
        return f"reclaim notice {self.pk}: {self.workload_name} ({self.state})"
