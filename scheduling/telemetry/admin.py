"""Admin: telemetry rows are written by ingestion only; operators may look them up, never edit them."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from scheduling.telemetry.models import (
    GpuSample,
    PoolSample,
    QuotaSample,
    WorkloadHourly,
    WorkloadSample,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WorkloadSample)
class WorkloadSampleAdmin(ReadOnlyAdmin):
    list_display = (
        "ts",
        "workload",
        "tenant",
        "kind",
        "allocated_milli",
        "sm_utilization",
        "source",
    )
    list_filter = ("kind", "source")
    search_fields = ("workload__name", "tenant__slug")
    list_select_related = ("workload", "tenant")
    raw_id_fields = ("workload", "tenant", "quota")
    date_hierarchy = "ts"


@admin.register(WorkloadHourly)
class WorkloadHourlyAdmin(ReadOnlyAdmin):
    list_display = ("hour", "workload", "tenant", "kind", "minutes", "allocated_milli_minutes")
    list_filter = ("kind",)
    search_fields = ("workload__name", "tenant__slug")
    list_select_related = ("workload", "tenant")
    raw_id_fields = ("workload", "tenant", "quota")


@admin.register(GpuSample)
class GpuSampleAdmin(ReadOnlyAdmin):
    list_display = ("ts", "gpu", "sm_utilization", "memory_used_mib", "allocated_milli", "source")
    list_filter = ("source",)
    search_fields = ("gpu__uuid", "gpu__node__name")
    list_select_related = ("gpu__node",)
    raw_id_fields = ("gpu",)


@admin.register(QuotaSample)
class QuotaSampleAdmin(ReadOnlyAdmin):
    list_display = (
        "ts",
        "resolution",
        "quota",
        "gpu_model",
        "minutes",
        "allocated_milli",
        "pending",
    )
    list_filter = ("resolution", "gpu_model")
    search_fields = ("quota__name", "tenant__slug")
    list_select_related = ("quota__group", "tenant")
    raw_id_fields = ("quota", "tenant", "group")


@admin.register(PoolSample)
class PoolSampleAdmin(ReadOnlyAdmin):
    list_display = ("ts", "resolution", "group", "minutes", "allocated_milli", "capacity_milli")
    list_filter = ("resolution", "group")
    list_select_related = ("group",)
    raw_id_fields = ("group",)
