"""Serializers of the codespaces API. They shape data; `codespaces.services` validates and decides."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from codespaces.choices import CodespaceState, GpuMode
from codespaces.models import Codespace, CodespaceEvent, CodespaceTemplate, TemplatePreset


class TemplatePresetSerializer(serializers.ModelSerializer):
    class Meta:
        model = TemplatePreset
        fields = [
            "name",
            "label",
            "gpu_mode",
            "gpu_count",
            "gpu_percent",
            "gpu_memory_gib",
            "gpu_model",
            "cpu_milli",
            "memory_mib",
            "position",
        ]


class CodespaceTemplateSerializer(serializers.ModelSerializer):
    """A template with its presets. Operators write it (If-Match with the ETag on updates)."""

    presets = TemplatePresetSerializer(many=True, required=False)
    allowed_tenants: serializers.SlugRelatedField = serializers.SlugRelatedField(
        many=True, slug_field="slug", read_only=True, help_text="Empty = every tenant."
    )
    allowed_tenant_slugs = serializers.ListField(
        child=serializers.SlugField(), write_only=True, required=False
    )

    class Meta:
        model = CodespaceTemplate
        fields = [
            "id",
            "name",
            "display_name",
            "image",
            "description",
            "home_volume_gib",
            "allow_custom",
            "allow_slices",
            "whole_card_models",
            "min_cpu_milli",
            "max_cpu_milli",
            "min_memory_mib",
            "max_memory_mib",
            "max_gpu_count",
            "idle_window_minutes",
            "idle_grace_minutes",
            "idle_threshold_percent",
            "max_per_user",
            "allowed_tenants",
            "allowed_tenant_slugs",
            "active",
            "presets",
            "version",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "version", "created_at", "updated_at"]

    def validate_whole_card_models(self, value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise serializers.ValidationError('A list of GPU model names, e.g. ["T4"].')
        return value


class CodespaceEventSerializer(serializers.ModelSerializer):
    actor: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = CodespaceEvent
        fields = ["id", "created_at", "kind", "from_state", "to_state", "message", "actor", "data"]
        read_only_fields = fields


_DATETIME = serializers.DateTimeField()


def _datetime(value: Any) -> str | None:
    """A datetime as DRF's DateTimeField renders it (ISO 8601, UTC as "Z"), None stays None."""
    return None if value is None else _DATETIME.to_representation(value)


class CodespaceSerializer(serializers.ModelSerializer):
    """A codespace as users see it: size, state, where it runs, how to connect, idle status."""

    owner: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    tenant: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    template: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    preset: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    gpu_percent = serializers.SerializerMethodField()
    gpu_memory_gib = serializers.SerializerMethodField()
    size = serializers.CharField(source="size_label", read_only=True)
    node = serializers.CharField(source="node_name", read_only=True)
    gpus = serializers.CharField(source="gpu_names", read_only=True)
    ide_url = serializers.SerializerMethodField()
    ssh_command = serializers.SerializerMethodField()
    idle_stop_due_at = serializers.DateTimeField(read_only=True, allow_null=True)
    pending_reason = serializers.CharField(source="waiting_reason", read_only=True)
    queue_position = serializers.IntegerField(
        source="waiting_position", read_only=True, allow_null=True
    )

    class Meta:
        model = Codespace
        fields = [
            "id",
            "name",
            "owner",
            "tenant",
            "quota",
            "template",
            "preset",
            "image",
            "gpu_mode",
            "gpu_count",
            "gpu_milli",
            "gpu_percent",
            "gpu_memory_mib",
            "gpu_memory_gib",
            "gpu_model",
            "cpu_milli",
            "memory_mib",
            "home_gib",
            "size",
            "state",
            "failure_reason",
            "pending_reason",
            "pending_code",
            "queue_position",
            "workload",
            "node",
            "gpus",
            "gpu_model_placed",
            "ide_url",
            "ssh_command",
            "last_activity_at",
            "idle_warned_at",
            "idle_stop_due_at",
            "idle_stopped_at",
            "gpu_hours_freed",
            "started_at",
            "stopped_at",
            "created_at",
            "updated_at",
            "version",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Codespace) -> dict[str, Any]:
        """The same dict DRF's field machinery builds (declared fields stay the schema's source), in
        one pass of attribute reads: a 20-row list spent most of its CPU in per-field DRF calls.
        `tests` compare both on every state; fetch rows with `codespaces.api.views.LIST_RELATED`."""
        obj = instance
        running = obj.state == CodespaceState.RUNNING
        preset = obj.preset
        return {
            "id": obj.pk,
            "name": obj.name,
            "owner": obj.owner.username,
            "tenant": obj.tenant.slug,
            "quota": obj.quota_id,
            "template": obj.template.name,
            "preset": preset.name if preset is not None else None,
            "image": obj.image,
            "gpu_mode": obj.gpu_mode,
            "gpu_count": obj.gpu_count,
            "gpu_milli": obj.gpu_milli,
            "gpu_percent": self.get_gpu_percent(obj),
            "gpu_memory_mib": obj.gpu_memory_mib,
            "gpu_memory_gib": self.get_gpu_memory_gib(obj),
            "gpu_model": obj.gpu_model,
            "cpu_milli": obj.cpu_milli,
            "memory_mib": obj.memory_mib,
            "home_gib": obj.home_gib,
            "size": obj.size_label,
            "state": obj.state,
            "failure_reason": obj.failure_reason,
            "pending_reason": obj.waiting_reason,
            "pending_code": obj.pending_code,
            "queue_position": obj.waiting_position,
            "workload": obj.workload_id,
            "node": obj.node_name,
            "gpus": obj.gpu_names,
            "gpu_model_placed": obj.gpu_model_placed,
            "ide_url": obj.ide_url() if running else None,
            "ssh_command": obj.ssh_command() if running else None,
            "last_activity_at": _datetime(obj.last_activity_at),
            "idle_warned_at": _datetime(obj.idle_warned_at),
            "idle_stop_due_at": _datetime(obj.idle_stop_due_at()),
            "idle_stopped_at": _datetime(obj.idle_stopped_at),
            "gpu_hours_freed": float(obj.gpu_hours_freed),
            "started_at": _datetime(obj.started_at),
            "stopped_at": _datetime(obj.stopped_at),
            "created_at": _datetime(obj.created_at),
            "updated_at": _datetime(obj.updated_at),
            "version": obj.version,
        }

    def get_gpu_percent(self, obj: Codespace) -> float:
        return obj.gpu_milli / 10 if obj.gpu_mode == GpuMode.SLICE else 0

    def get_gpu_memory_gib(self, obj: Codespace) -> float:
        return obj.gpu_memory_mib / 1024

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_ide_url(self, obj: Codespace) -> str | None:
        return obj.ide_url() if obj.state == CodespaceState.RUNNING else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_ssh_command(self, obj: Codespace) -> str | None:
        return obj.ssh_command() if obj.state == CodespaceState.RUNNING else None


class SizeSerializer(serializers.Serializer):
    """A custom size (ignored when `preset` is given). Ranges are checked by the service."""

    gpu_mode = serializers.ChoiceField(choices=GpuMode.choices, default=GpuMode.SLICE)
    gpu_percent = serializers.IntegerField(
        required=False, default=0, min_value=-1000, max_value=1000, help_text="Slice compute, 1-100"
    )
    gpu_memory_gib = serializers.IntegerField(
        required=False, default=0, min_value=-1000000, max_value=1000000
    )
    gpu_count = serializers.IntegerField(required=False, default=1, min_value=0, max_value=64)
    gpu_model = serializers.CharField(required=False, default="", allow_blank=True, max_length=63)
    cpu_milli = serializers.IntegerField(required=False, default=2000, min_value=0, max_value=10**7)
    memory_mib = serializers.IntegerField(
        required=False, default=8192, min_value=0, max_value=10**9
    )


class CodespaceCreateSerializer(SizeSerializer):
    name = serializers.CharField(max_length=200)
    template = serializers.CharField(max_length=63, help_text="Template name (or id).")
    tenant = serializers.SlugField(
        required=False, help_text="Team slug; optional when you belong to exactly one team."
    )
    quota = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        help_text="Quota id; default: the team's first",
    )
    preset = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=63,
        help_text="Preset name; empty = custom size",
    )


class PreviewRequestSerializer(SizeSerializer):
    template = serializers.CharField(max_length=63)
    tenant = serializers.SlugField(required=False)
    quota = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class PreviewSerializer(serializers.Serializer):
    starts_now = serializers.BooleanField()
    code = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    node = serializers.CharField(allow_null=True)
    quota = serializers.IntegerField()


class PresetOptionSerializer(serializers.Serializer):
    preset = TemplatePresetSerializer()
    starts_now = serializers.BooleanField()
    code = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    node = serializers.CharField(allow_null=True)
    refused = serializers.CharField(allow_blank=True)


class PickerSerializer(serializers.Serializer):
    """What fits now: quota headroom, the pool's largest free slice, each preset's preview."""

    quota = serializers.IntegerField(source="quota.pk")
    pool = serializers.CharField(source="quota.group.name")
    headroom = serializers.DictField(child=serializers.FloatField(allow_null=True))
    largest_free_slice_gpu_milli = serializers.IntegerField(source="largest_free_gpu_milli")
    largest_free_slice_gpu_memory_mib = serializers.IntegerField(
        source="largest_free_gpu_memory_mib"
    )
    presets = PresetOptionSerializer(source="options", many=True)


class UtilizationSerializer(serializers.Serializer):
    ts = serializers.ListField(child=serializers.DateTimeField())
    values = serializers.ListField(child=serializers.FloatField(allow_null=True))


class SavingsPoolSerializer(serializers.Serializer):
    pool = serializers.CharField()
    codespaces = serializers.IntegerField()
    cards_without_slicing = serializers.IntegerField()
    cards_occupied = serializers.IntegerField()


class SavingsSerializer(serializers.Serializer):
    codespaces = serializers.IntegerField()
    cards_without_slicing = serializers.IntegerField()
    cards_occupied = serializers.IntegerField()
    cards_saved = serializers.IntegerField()
    percent_saved = serializers.FloatField()
    gpu_hours_freed_by_idle_stop = serializers.FloatField()
    per_pool = SavingsPoolSerializer(many=True)
