"""Operator back office for templates and codespaces. State changes go through services, not edits."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from codespaces import services
from codespaces.delete_preview import template_retire_impact
from codespaces.models import Codespace, CodespaceEvent, CodespaceTemplate, TemplatePreset
from portal.admin_reason import MAX_LISTED, reason_or_page
from portal.errors import DomainError


class TemplatePresetInline(admin.TabularInline):
    model = TemplatePreset
    extra = 0


@admin.register(CodespaceTemplate)
class CodespaceTemplateAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "display_name",
        "image",
        "home_volume_gib",
        "idle_window_minutes",
        "idle_threshold_percent",
        "max_per_user",
        "active",
    )
    list_filter = ("active", "allow_slices", "allow_custom")
    search_fields = ("name", "display_name", "image")
    filter_horizontal = ("allowed_tenants",)
    inlines = [TemplatePresetInline]
    readonly_fields = ("version", "created_at", "updated_at")

    actions = ["retire"]

    # Templates are never deleted (codespaces keep a reference): "delete" retires, through the service
    # (audited, with the operator's reason), as the page and the API do.
    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Delete (retire) the selected templates")
    def retire(
        self, request: HttpRequest, queryset: QuerySet[CodespaceTemplate]
    ) -> TemplateResponse | None:
        reason = reason_or_page(
            self,
            request,
            queryset,
            action="retire",
            title="Delete (retire) templates",
            what=" ".join(template_retire_impact(t).summary for t in queryset[:MAX_LISTED]),
            required=False,
        )
        if isinstance(reason, TemplateResponse):
            return reason
        for template in queryset:
            services.retire_template(template, actor=request.user, reason=reason)
        self.message_user(request, f"Retired {queryset.count()} template(s).", messages.SUCCESS)
        return None


class CodespaceEventInline(admin.TabularInline):
    model = CodespaceEvent
    extra = 0
    can_delete = False
    fields = ("created_at", "kind", "from_state", "to_state", "message", "actor")
    readonly_fields = fields


@admin.action(description="Stop the selected codespaces (home kept)")
def stop_codespaces(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Codespace]
) -> TemplateResponse | None:
    reason = reason_or_page(
        modeladmin,
        request,
        queryset,
        action="stop_codespaces",
        title="Stop codespaces",
        what="The selected codespaces stop and release their GPUs; their home volumes are kept. "
        "Their owners read your reason in the timeline.",
    )
    if isinstance(reason, TemplateResponse):
        return reason
    for codespace in queryset:
        try:
            services.stop_codespace(
                codespace,
                actor=request.user,
                reason=f"Stopped by operator {request.user.get_username()}: {reason}",
            )
        except DomainError as exc:
            modeladmin.message_user(request, exc.message, level=messages.WARNING)
    return None


@admin.register(Codespace)
class CodespaceAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "owner",
        "tenant",
        "template",
        "state",
        "desired_state",
        "gpu_mode",
        "gpu_milli",
        "gpu_memory_mib",
        "created_at",
    )
    list_filter = ("state", "desired_state", "gpu_mode", "template")
    search_fields = ("name", "owner__username", "tenant__slug")
    list_select_related = ("owner", "tenant", "template")
    raw_id_fields = ("owner", "tenant", "quota", "template", "preset", "workload")
    readonly_fields = (
        "state",
        "desired_state",
        "version",
        "workload",
        "node_name",
        "gpu_names",
        "gpu_model_placed",
        "waiting_reason",
        "waiting_position",
        "failure_reason",
        "idle_warned_at",
        "idle_stopped_at",
        "gpu_hours_freed",
        "started_at",
        "stopped_at",
        "deleted_at",
        "created_at",
        "updated_at",
    )
    inlines = [CodespaceEventInline]
    actions = [stop_codespaces]
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # codespaces are created through the page or the API (validation, workload)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deleted through the page or the API (release, home volume, reason, audit)


@admin.register(CodespaceEvent)
class CodespaceEventAdmin(admin.ModelAdmin):
    list_display = ("created_at", "codespace", "kind", "from_state", "to_state", "message")
    list_filter = ("kind",)
    search_fields = ("codespace__name", "message")
    list_select_related = ("codespace",)
    raw_id_fields = ("codespace", "actor")
    show_full_result_count = False
