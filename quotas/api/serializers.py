"""Serializers of the quotas API. They shape data only; views call quotas.services."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from quotas.fairness import MAX_HALF_LIFE_HOURS
from quotas.models import MAX_MIN_RUNTIME_SECONDS, RESOURCE_FIELDS, Quota, QuotaChange, QuotaGroup
from quotas.presentation import headroom_sentence
from quotas.resources import Resources, Side
from quotas.sharing import MAX_MIG_PROFILES, MAX_TIMESLICE_REPLICAS, SharingMode
from quotas.usage import GroupSnapshot, SideUsage, group_snapshot


class ResourcesSerializer(serializers.Serializer):
    """A resource vector: GPU milli (1000 = one GPU), GPU memory MiB, CPU milli, memory MiB."""

    gpu_milli = serializers.IntegerField()
    gpu_memory_mib = serializers.IntegerField()
    cpu_milli = serializers.IntegerField()
    memory_mib = serializers.IntegerField()


class SideStatusSerializer(serializers.Serializer):
    """One side of a quota now: bounds, use, demand, runtime share, borrowed and headroom."""

    min = ResourcesSerializer()
    max = ResourcesSerializer()
    weight = ResourcesSerializer()
    used = ResourcesSerializer()
    pending = ResourcesSerializer()
    demand = ResourcesSerializer()
    runtime = ResourcesSerializer(help_text="Runtime share: what the quota may use right now.")
    borrowed = ResourcesSerializer(help_text="Used beyond min (lent by siblings, reclaimable).")
    over_runtime = ResourcesSerializer(
        help_text="Used beyond the runtime share (will be reclaimed)."
    )
    headroom = ResourcesSerializer(help_text="How much more it could start now.")
    guaranteed_headroom = ResourcesSerializer(help_text="The part of the headroom within min.")


def side_status(usage: SideUsage) -> dict[str, Any]:
    return {
        name: getattr(usage, name).as_dict()
        for name in (
            "min",
            "max",
            "weight",
            "used",
            "pending",
            "demand",
            "runtime",
            "borrowed",
            "over_runtime",
            "headroom",
            "guaranteed_headroom",
        )
    }


class QuotaStatusSerializer(serializers.Serializer):
    gpu = SideStatusSerializer()
    cpu = SideStatusSerializer()
    headroom_text = serializers.CharField()


def _snapshot(context: dict[str, Any], group_id: int) -> GroupSnapshot:
    cache = context.setdefault("snapshots", {})
    if group_id not in cache:
        cache[group_id] = group_snapshot(group_id)
    return cache[group_id]


class QuotaSerializer(serializers.ModelSerializer):
    """A quota with its bounds and its live status (runtime share, borrowed, headroom)."""

    tenant: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    group_name = serializers.CharField(source="group.name", read_only=True)
    checkpoint_webhook_url = serializers.CharField(
        read_only=True, help_text="Polite reclaim: the checkpoint webhook (empty = none)."
    )
    status = serializers.SerializerMethodField()

    class Meta:
        model = Quota
        fields = [
            "id",
            "group",
            "group_name",
            "tenant",
            "name",
            *RESOURCE_FIELDS,
            "shared_weight",
            "lend_idle_min",
            "max_gpus_per_user",
            "equal_borrowing_share",
            "checkpoint_webhook_url",
            "version",
            "status",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(QuotaStatusSerializer)
    def get_status(self, quota: Quota) -> dict[str, Any]:
        snapshot = _snapshot(self.context, quota.group_id)
        if quota.pk not in snapshot.quotas:
            snapshot = group_snapshot(quota.group_id)
            self.context["snapshots"][quota.group_id] = snapshot
        usage = snapshot.quota(quota.pk)
        return {
            "gpu": side_status(usage.gpu),
            "cpu": side_status(usage.cpu),
            "headroom_text": headroom_sentence(usage),
        }


def _integer(**kwargs: Any) -> serializers.IntegerField:
    return serializers.IntegerField(required=False, **kwargs)


class QuotaWriteFieldsSerializer(serializers.Serializer):
    """The editable fields of a quota (all optional on update). Range checks happen in the service."""

    gpu_min_gpu_milli = _integer()
    gpu_max_gpu_milli = _integer()
    gpu_min_gpu_memory_mib = _integer()
    gpu_max_gpu_memory_mib = _integer()
    gpu_min_cpu_milli = _integer()
    gpu_max_cpu_milli = _integer()
    gpu_min_memory_mib = _integer()
    gpu_max_memory_mib = _integer()
    cpu_min_cpu_milli = _integer()
    cpu_max_cpu_milli = _integer()
    cpu_min_memory_mib = _integer()
    cpu_max_memory_mib = _integer()
    shared_weight = serializers.IntegerField(required=False, allow_null=True)
    lend_idle_min = serializers.BooleanField(required=False)


class NewQuotaWhatIfSerializer(QuotaWriteFieldsSerializer):
    """A proposed new quota: which tenant (slug), its name, and its bounds."""

    tenant = serializers.SlugField()
    name = serializers.SlugField(required=False, max_length=63)


class QuotaUpdateSerializer(QuotaWriteFieldsSerializer):
    note = serializers.CharField(required=False, allow_blank=True, max_length=500)


class QuotaCreateSerializer(QuotaUpdateSerializer):
    group = serializers.PrimaryKeyRelatedField(queryset=QuotaGroup.objects.all())
    tenant = serializers.SlugField()
    name = serializers.SlugField(required=False, max_length=63)


class SavedQuotaSerializer(QuotaSerializer):
    warnings = serializers.SerializerMethodField()

    class Meta(QuotaSerializer.Meta):
        fields = [*QuotaSerializer.Meta.fields, "warnings"]
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_warnings(self, quota: Quota) -> list[str]:
        return list(self.context.get("warnings", []))


class WhatIfRowSerializer(serializers.Serializer):
    quota_id = serializers.IntegerField(allow_null=True)
    name = serializers.CharField()
    tenant = serializers.CharField()
    is_target = serializers.BooleanField()
    gpu_demand = ResourcesSerializer()
    cpu_demand = ResourcesSerializer()
    gpu_before = ResourcesSerializer()
    gpu_after = ResourcesSerializer()
    cpu_before = ResourcesSerializer()
    cpu_after = ResourcesSerializer()


def what_if_row(row: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "quota_id": row.quota_id,
        "name": row.name,
        "tenant": row.tenant,
        "is_target": row.is_target,
    }
    for name in ("gpu_demand", "cpu_demand", "gpu_before", "gpu_after", "cpu_before", "cpu_after"):
        value: Resources = getattr(row, name)
        data[name] = value.as_dict()
    return data


class QuotaChangeSerializer(serializers.ModelSerializer):
    """One audited change: who, when, before/after (JSON of the editable fields), note."""

    actor = serializers.SerializerMethodField()
    changed = serializers.SerializerMethodField()

    class Meta:
        model = QuotaChange
        fields = [
            "id",
            "subject",
            "subject_name",
            "action",
            "actor",
            "created_at",
            "version",
            "before",
            "after",
            "changed",
            "note",
            "warnings",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_actor(self, change: QuotaChange) -> str | None:
        return change.actor.get_username() if change.actor else None

    @extend_schema_field(serializers.ListField(child=serializers.ListField()))
    def get_changed(self, change: QuotaChange) -> list[list[Any]]:
        return [list(item) for item in change.changed_fields()]


class GroupCapacitySerializer(serializers.Serializer):
    gpu = ResourcesSerializer()
    cpu = ResourcesSerializer()
    nodes_counted = serializers.IntegerField()
    nodes_excluded = serializers.IntegerField()
    gpus_healthy = serializers.IntegerField()
    gpus_unhealthy = serializers.IntegerField()


class GroupAllocationSideSerializer(serializers.Serializer):
    sum_of_mins = ResourcesSerializer()
    used = ResourcesSerializer()
    free = ResourcesSerializer()


class GroupAllocationSerializer(serializers.Serializer):
    gpu = GroupAllocationSideSerializer()
    cpu = GroupAllocationSideSerializer()


class NodeOverlapSerializer(serializers.Serializer):
    """A node that several groups' selectors match: it counts toward `counted_in` (the oldest) only."""

    node = serializers.CharField()
    groups = serializers.ListField(child=serializers.CharField())
    counted_in = serializers.CharField()


class QuotaGroupSerializer(serializers.ModelSerializer):
    """A quota group (node pool) with its capacity and how much of it is promised and used.
    `overlaps`: nodes another group's selector matches too (a misconfiguration to fix; see
    docs/quotas.md "Groups never share a node")."""

    capacity = serializers.SerializerMethodField()
    overlaps = serializers.SerializerMethodField()
    allocation = serializers.SerializerMethodField()
    quota_count = serializers.SerializerMethodField()

    class Meta:
        model = QuotaGroup
        fields = [
            "id",
            "name",
            "description",
            "node_selector",
            "allow_overcommitted_min",
            "fair_share_half_life_hours",
            "min_runtime_seconds",
            "reclaim_notice_seconds",
            "sharing_mode",
            "mig_profiles",
            "timeslice_replicas",
            "version",
            "capacity",
            "overlaps",
            "allocation",
            "quota_count",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(GroupCapacitySerializer)
    def get_capacity(self, group: QuotaGroup) -> dict[str, Any]:
        capacity = _snapshot(self.context, group.pk).capacity
        return {
            "gpu": capacity.gpu.as_dict(),
            "cpu": capacity.cpu.as_dict(),
            "nodes_counted": capacity.nodes_counted,
            "nodes_excluded": capacity.nodes_excluded,
            "gpus_healthy": capacity.gpus_healthy,
            "gpus_unhealthy": capacity.gpus_unhealthy,
        }

    @extend_schema_field(NodeOverlapSerializer(many=True))
    def get_overlaps(self, group: QuotaGroup) -> list[dict[str, Any]]:
        return [
            {"node": o.node, "groups": list(o.groups), "counted_in": o.counted_in}
            for o in _snapshot(self.context, group.pk).capacity.overlaps
        ]

    @extend_schema_field(GroupAllocationSerializer)
    def get_allocation(self, group: QuotaGroup) -> dict[str, Any]:
        snapshot = _snapshot(self.context, group.pk)
        return {
            side.value: {
                "sum_of_mins": snapshot.sum_of_mins(side).as_dict(),
                "used": snapshot.used(side).as_dict(),
                "free": snapshot.free(side).as_dict(),
            }
            for side in (Side.GPU, Side.CPU)
        }

    @extend_schema_field(serializers.IntegerField())
    def get_quota_count(self, group: QuotaGroup) -> int:
        return len(_snapshot(self.context, group.pk).quotas)


class QuotaGroupWriteSerializer(serializers.Serializer):
    description = serializers.CharField(required=False, allow_blank=True)
    node_selector = serializers.DictField(child=serializers.CharField(), required=False)
    allow_overcommitted_min = serializers.BooleanField(required=False)
    fair_share_half_life_hours = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_HALF_LIFE_HOURS,
        help_text="Decayed fair share half-life in hours; null or 0 = off.",
    )  # fmt: skip
    min_runtime_seconds = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_MIN_RUNTIME_SECONDS,
        help_text="Minimum runtime before preemption in seconds; 0 = off.",
    )  # fmt: skip
    sharing_mode = serializers.ChoiceField(choices=SharingMode.choices, required=False)
    mig_profiles = serializers.ListField(
        child=serializers.CharField(max_length=16), required=False, max_length=MAX_MIG_PROFILES
    )
    timeslice_replicas = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_TIMESLICE_REPLICAS
    )
    note = serializers.CharField(required=False, allow_blank=True, max_length=500)


class QuotaGroupCreateSerializer(QuotaGroupWriteSerializer):
    name = serializers.CharField(max_length=63)
