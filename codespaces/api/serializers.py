"""Serializers of the codespaces API. They shape data; `codespaces.services` validates and decides."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, tzinfo
from typing import Any

from django.db.models import Model, OuterRef, QuerySet, Subquery
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from codespaces import display
from codespaces.choices import CodespaceState, GpuMode
from codespaces.models import (
    MAX_ALLOWED_TENANTS,
    MAX_PRESETS,
    Codespace,
    CodespaceEvent,
    CodespaceTemplate,
    TemplatePreset,
)
from codespaces.phase import Observed, PlacementFacts, WorkloadFacts, observe
from codespaces.placements import active_placements
from codespaces.services.sizing import SIZE_INPUT_BOUNDS
from codespaces.services.templates_admin import TEMPLATE_FIELDS
from core import units
from portal.api.serializers import InputSerializer


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
            "mig_profile",
            "cpu_milli",
            "memory_mib",
            "position",
        ]


class CodespaceTemplateSerializer(serializers.ModelSerializer):
    """A template with its presets. Operators write it (If-Match with the ETag on updates)."""

    presets: serializers.ListSerializer = serializers.ListSerializer(
        child=TemplatePresetSerializer(), required=False, max_length=MAX_PRESETS
    )
    allowed_tenants: serializers.SlugRelatedField = serializers.SlugRelatedField(
        many=True, slug_field="slug", read_only=True, help_text="Empty = every tenant."
    )
    allowed_tenant_slugs = serializers.ListField(
        child=serializers.SlugField(max_length=63),
        write_only=True,
        required=False,
        max_length=MAX_ALLOWED_TENANTS,
    )

    class Meta:
        model = CodespaceTemplate
        # the template's own fields are the services' list (one list: `TEMPLATE_FIELDS`)
        fields = [
            "id",
            *TEMPLATE_FIELDS,
            "allowed_tenants",
            "allowed_tenant_slugs",
            "presets",
            "version",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "version", "created_at", "updated_at"]


class CodespaceEventSerializer(serializers.ModelSerializer):
    actor: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = CodespaceEvent
        fields = ["id", "created_at", "kind", "from_state", "to_state", "message", "actor", "data"]
        read_only_fields = fields


def _datetime(value: datetime | None, zone: tzinfo) -> str | None:
    """An aware datetime as DRF's DateTimeField renders it (ISO 8601 in the current time zone `zone`,
    UTC as "Z"), None stays None: the same steps without the field's per-call settings lookups."""
    if value is None:
        return None
    text = value.astimezone(zone).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


# The row `CodespaceSerializer` renders: the codespace's own columns (foreign keys by id, under the
# field's name) and ten columns of five related tables, {row key: (relation, column)}.
ROW_RELATED = {
    "owner_username": ("owner", "username"),
    "tenant_slug": ("tenant", "slug"),
    "template_name": ("template", "name"),
    "template_idle_grace_minutes": ("template", "idle_grace_minutes"),
    "preset_name": ("preset", "name"),
    "workload_state": ("workload", "state"),
    "workload_pending_reason": ("workload", "pending_reason"),
    "workload_pending_code": ("workload", "pending_code"),
    "workload_queue_position": ("workload", "queue_position"),
    "workload_failure_reason": ("workload", "failure_reason"),
}
ROW_OWN = tuple(
    f.name
    for f in Codespace._meta.concrete_fields
    if f.name not in ("deleted_at", "owner", "tenant", "template", "preset")
)
_ROW_OWN_ATTRS = tuple(
    (f.name, f.attname) for f in Codespace._meta.concrete_fields if f.name in ROW_OWN
)


def _related_value(relation: str, column: str) -> Subquery:
    model = Codespace._meta.get_field(relation).related_model
    assert isinstance(model, type)
    assert issubclass(model, Model)
    pk = model._default_manager.filter(pk=OuterRef(f"{relation}_id"))
    return Subquery(pk.values(column)[:1])


def codespace_rows(queryset: QuerySet[Codespace]) -> QuerySet[Any]:
    """`queryset` as the flat dict rows `CodespaceSerializer` renders, without model instances
    (building them cost more CPU than the query on a list page). The related columns are scalar
    subqueries by primary key, not joins: PostgreSQL planned the six-table join for ~0.6 ms per page,
    longer than it ran it."""
    related = {key: _related_value(*source) for key, source in ROW_RELATED.items()}
    return queryset.select_related(None).annotate(**related).values(*ROW_OWN, *related)


def flat_row(obj: Codespace) -> dict[str, Any]:
    """A model instance as a `codespace_rows()` row (reads the same related objects)."""
    row = {name: getattr(obj, attname) for name, attname in _ROW_OWN_ATTRS}
    workload = obj.workload if obj.workload_id is not None else None
    preset = obj.preset if obj.preset_id is not None else None
    row.update(
        {
            "owner_username": obj.owner.get_username(),
            "tenant_slug": obj.tenant.slug,
            "template_name": obj.template.name,
            "template_idle_grace_minutes": obj.template.idle_grace_minutes,
            "preset_name": preset.name if preset is not None else None,
            "workload_state": workload.state if workload else None,
            "workload_pending_reason": workload.pending_reason if workload else None,
            "workload_pending_code": workload.pending_code if workload else None,
            "workload_queue_position": workload.queue_position if workload else None,
            "workload_failure_reason": workload.failure_reason if workload else None,
            OBSERVED: obj.observed,
        }
    )
    return row


OBSERVED = "_observed"
"""The row key of what `observe` made of a row (set by `flat_row` and the list serializer)."""

PLACED_WORKLOAD_STATES = ("placed", "running")


def observed_of(row: Mapping[str, Any], placement: PlacementFacts | None = None) -> Observed:
    """What a row's codespace is now (`codespaces.phase.observe` on the row's columns)."""
    if OBSERVED in row:
        observed: Observed = row[OBSERVED]
        return observed
    workload = (
        WorkloadFacts(
            state=row["workload_state"],
            pending_reason=row["workload_pending_reason"] or "",
            pending_code=row["workload_pending_code"] or "",
            queue_position=row["workload_queue_position"],
            failure_reason=row["workload_failure_reason"] or "",
        )
        if row["workload"] is not None and row["workload_state"] is not None
        else None
    )
    return observe(row["desired_state"], workload, placement)


class CodespaceListSerializer(serializers.ListSerializer):
    """Renders a page of rows with their workloads' placements read in one query."""

    def to_representation(self, data: Any) -> list[Any]:
        rows = list(data.all() if hasattr(data, "all") else data)
        placements = active_placements(
            r["workload"]
            for r in rows
            if isinstance(r, Mapping) and r.get("workload_state") in PLACED_WORKLOAD_STATES
        )
        child = self.child
        assert isinstance(child, CodespaceSerializer)
        return [
            child.to_representation(
                {**r, OBSERVED: observed_of(r, placements.get(r["workload"] or 0))}
                if isinstance(r, Mapping)
                else r
            )
            for r in rows
        ]


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
    # what it is now, derived (`Codespace.phase`), not the column that caches it
    state = serializers.ChoiceField(choices=CodespaceState.choices, source="phase", read_only=True)
    node = serializers.CharField(source="node_name", read_only=True)
    gpus = serializers.CharField(source="gpu_names", read_only=True)
    gpu_model_placed = serializers.CharField(read_only=True)
    failure_reason = serializers.CharField(read_only=True)
    pending_code = serializers.CharField(read_only=True)
    ide_url = serializers.SerializerMethodField()
    ssh_command = serializers.SerializerMethodField()
    idle_stop_due_at = serializers.DateTimeField(read_only=True, allow_null=True)
    pending_reason = serializers.CharField(source="waiting_reason", read_only=True)
    queue_position = serializers.IntegerField(
        source="waiting_position", read_only=True, allow_null=True
    )

    class Meta:
        model = Codespace
        list_serializer_class = CodespaceListSerializer
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

    def to_representation(self, instance: Codespace | Mapping[str, Any]) -> dict[str, Any]:
        """The same dict DRF's field machinery builds from the declared fields (they stay the schema's
        source), in one pass over a flat row: a 20-row list spent most of its CPU in per-field DRF
        calls and in building model instances. `instance` is a Codespace or a row of
        `codespace_rows()` (the list's query, no model instances); `tests` compare both with DRF."""
        row = instance if isinstance(instance, Mapping) else flat_row(instance)
        gpu_mode = row["gpu_mode"]
        observed = observed_of(row)
        state = observed.phase
        running = state == CodespaceState.RUNNING
        name, username, slug = row["name"], row["owner_username"], row["tenant_slug"]
        zone = self._zone()
        return {
            "id": row["id"],
            "name": name,
            "owner": username,
            "tenant": slug,
            "quota": row["quota"],
            "template": row["template_name"],
            "preset": row["preset_name"],
            "image": row["image"],
            "gpu_mode": gpu_mode,
            "gpu_count": row["gpu_count"],
            "gpu_milli": row["gpu_milli"],
            "gpu_percent": display.gpu_percent(gpu_mode, row["gpu_milli"]),
            "gpu_memory_mib": row["gpu_memory_mib"],
            "gpu_memory_gib": units.mib_to_gib(row["gpu_memory_mib"]),
            "gpu_model": row["gpu_model"],
            "cpu_milli": row["cpu_milli"],
            "memory_mib": row["memory_mib"],
            "home_gib": row["home_gib"],
            "size": display.size_label(
                gpu_mode=gpu_mode,
                gpu_count=row["gpu_count"],
                gpu_milli=row["gpu_milli"],
                gpu_memory_mib=row["gpu_memory_mib"],
                gpu_model=row["gpu_model"],
                cpu_milli=row["cpu_milli"],
                memory_mib=row["memory_mib"],
            ),
            "state": state,
            "failure_reason": observed.failure_reason,
            "pending_reason": observed.pending_reason,
            "pending_code": observed.pending_code,
            "queue_position": observed.queue_position,
            "workload": row["workload"],
            "node": observed.node_name,
            "gpus": observed.gpu_names,
            "gpu_model_placed": observed.gpu_model_placed,
            "ide_url": display.ide_url(name, username, slug) if running else None,
            "ssh_command": display.ssh_command(name, username, slug) if running else None,
            "last_activity_at": _datetime(row["last_activity_at"], zone),
            "idle_warned_at": _datetime(row["idle_warned_at"], zone),
            "idle_stop_due_at": _datetime(
                display.idle_stop_due_at(row["idle_warned_at"], row["template_idle_grace_minutes"]),
                zone,
            ),
            "idle_stopped_at": _datetime(row["idle_stopped_at"], zone),
            "gpu_hours_freed": float(row["gpu_hours_freed"]),
            "started_at": _datetime(row["started_at"], zone),
            "stopped_at": _datetime(row["stopped_at"], zone),
            "created_at": _datetime(row["created_at"], zone),
            "updated_at": _datetime(row["updated_at"], zone),
            "version": row["version"],
        }

    def _zone(self) -> tzinfo:
        """The current time zone, looked up once per serializer (a list renders many rows with one)."""
        zone: tzinfo | None = self.__dict__.get("_current_zone")
        if zone is None:
            zone = self.__dict__["_current_zone"] = timezone.get_current_timezone()
        return zone

    def get_gpu_percent(self, obj: Codespace) -> float:
        return display.gpu_percent(obj.gpu_mode, obj.gpu_milli)

    def get_gpu_memory_gib(self, obj: Codespace) -> float:
        return units.mib_to_gib(obj.gpu_memory_mib)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_ide_url(self, obj: Codespace) -> str | None:
        return obj.ide_url() if obj.phase == CodespaceState.RUNNING else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_ssh_command(self, obj: Codespace) -> str | None:
        return obj.ssh_command() if obj.phase == CodespaceState.RUNNING else None


def _size_field(name: str, **kwargs: Any) -> serializers.IntegerField:
    """An optional integer field of a typed size, bounded by `SIZE_INPUT_BOUNDS[name]`."""
    low, high = SIZE_INPUT_BOUNDS[name]
    return serializers.IntegerField(required=False, min_value=low, max_value=high, **kwargs)


class SizeSerializer(InputSerializer):
    """A custom size (ignored when `preset` is given), bounded by `SIZE_INPUT_BOUNDS` (the pages'
    forms use the same). Ranges are checked by the service."""

    gpu_mode = serializers.ChoiceField(choices=GpuMode.choices, default=GpuMode.SLICE)
    gpu_percent = _size_field("gpu_percent", default=0, help_text="Slice compute, 1-100")
    gpu_memory_gib = _size_field("gpu_memory_gib", default=0)
    gpu_count = _size_field("gpu_count", default=1)
    gpu_model = serializers.CharField(required=False, default="", allow_blank=True, max_length=63)
    mig_profile = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=16,
        help_text="With gpu_mode mig: one of the pool's MIG profiles, e.g. 1g.10gb.",
    )
    cpu_milli = _size_field("cpu_milli", default=2000)
    memory_mib = _size_field("memory_mib", default=8192)


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
