"""Elastic quota tree: QuotaGroup (a pool of nodes, never borrowing from another) → Quota (a tenant's leaf)."""

from __future__ import annotations

from django.db import models

from portal.models import Tenant, dns_label_validator


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
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Quota(models.Model):
    """A tenant's leaf quota in one group. Resource fields are added by the quotas app (min/max per
    dimension and side, weight, lending)."""

    group = models.ForeignKey(QuotaGroup, on_delete=models.PROTECT, related_name="quotas")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quotas")
    name = models.SlugField(max_length=63, validators=[dns_label_validator])
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
