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
from quotas.resources import DIMENSIONS, Resources, Side
from quotas.sharing import MAX_TIMESLICE_REPLICAS, Sharing, SharingMode, sharing_sentence

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
