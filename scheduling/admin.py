"""Admin: the operator back office for inventory, workloads, gangs and placements. State changes go
through the services (admin actions), never through free edits of state fields."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from portal.admin_reason import MAX_LISTED, reason_or_page
from portal.choices import OperatorActionKind
from scheduling import services
from scheduling.models import (
    Gang,
    Gpu,
    InvariantAuditRun,
    MigReconfiguration,
    Node,
    Placement,
    PlacementGpu,
    Reservation,
    Shard,
    SimulatedPod,
    Workload,
)
from scheduling.services.operator_impact import gpu_action_impact, node_action_impact


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ("index", "uuid", "model", "memory_mib", "numa_node", "nvlink_group", "healthy")
    readonly_fields = ("healthy",)
    show_change_link = True


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("name", "pool", "gpu_model", "cpu_milli", "memory_mib", "cordoned", "healthy")
    list_filter = ("pool", "gpu_model", "cordoned", "healthy")
    search_fields = ("name",)
    readonly_fields = ("cordoned", "healthy", "created_at", "updated_at")
    inlines = [GpuInline]
    actions = ["cordon", "uncordon", "drain"]
    show_full_result_count = False

    @admin.action(description="Cordon (take no new work)")
    def cordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> TemplateResponse | None:
        reason = reason_or_page(
            self,
            request,
            queryset,
            action="cordon",
            title="Cordon nodes",
            what="The selected nodes take no new work; what runs on them keeps running.",
        )
        if isinstance(reason, TemplateResponse):
            return reason
        for node in queryset:
            services.cordon_node(node.pk, reason=reason, actor=request.user)
        self.message_user(request, f"Cordoned {queryset.count()} node(s).", messages.SUCCESS)
        return None

    @admin.action(description="Uncordon (accept new work)")
    def uncordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            services.uncordon_node(node.pk, actor=request.user)
        self.message_user(request, f"Uncordoned {queryset.count()} node(s).", messages.SUCCESS)

    @admin.action(description="Drain (cordon and requeue its workloads)")
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> TemplateResponse | None:
        reason = reason_or_page(
            self,
            request,
            queryset,
            action="drain",
            title="Drain nodes",
            what=" ".join(
                f"{node.name}: {node_action_impact(node, OperatorActionKind.DRAIN).summary}"
                for node in queryset[:MAX_LISTED]
            ),
        )
        if isinstance(reason, TemplateResponse):
            return reason
        requeued = sum(
            len(services.drain_node(node.pk, reason=reason, actor=request.user))
            for node in queryset
        )
        self.message_user(request, f"Drained; {requeued} workload(s) requeued.", messages.SUCCESS)
        return None


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = (
        "__str__",
        "model",
        "memory_mib",
        "numa_node",
        "nvlink_group",
        "healthy",
        "mig_dynamic",
    )
    list_filter = ("model", "healthy", "mig_dynamic")
    search_fields = ("node__name", "uuid")
    list_select_related = ("node",)
    readonly_fields = ("healthy",)
    raw_id_fields = ("node",)
    actions = ["mark_unhealthy", "mark_healthy"]

    @admin.action(description="Mark unhealthy (requeue its workloads)")
    def mark_unhealthy(
        self, request: HttpRequest, queryset: QuerySet[Gpu]
    ) -> TemplateResponse | None:
        reason = reason_or_page(
            self,
            request,
            queryset,
            action="mark_unhealthy",
            title="Mark GPUs unhealthy",
            what=" ".join(
                f"{gpu}: {gpu_action_impact(gpu, OperatorActionKind.GPU_UNHEALTHY).summary}"
                for gpu in queryset[:MAX_LISTED]
            ),
        )
        if isinstance(reason, TemplateResponse):
            return reason
        requeued = sum(
            len(services.set_gpu_health(g.pk, healthy=False, reason=reason, actor=request.user))
            for g in queryset
        )
        self.message_user(request, f"Marked unhealthy; {requeued} workload(s) requeued.")
        return None

    @admin.action(description="Mark healthy")
    def mark_healthy(self, request: HttpRequest, queryset: QuerySet[Gpu]) -> None:
        for g in queryset:
            services.set_gpu_health(g.pk, healthy=True, actor=request.user)
        self.message_user(request, f"Marked {queryset.count()} GPU(s) healthy.")


@admin.register(Workload)
class WorkloadAdmin(admin.ModelAdmin):
    list_display = (
        "id", "name", "kind", "tenant", "quota", "state", "gpu_count", "gpu_milli", "priority",
        "queue_position", "submitted_at",
    )  # fmt: skip
    list_filter = ("state", "kind", "preemptible")
    search_fields = ("name", "tenant__slug")
    list_select_related = ("tenant", "quota__group")
    raw_id_fields = ("tenant", "quota", "owner", "gang")
    readonly_fields = (
        "state", "pending_code", "pending_reason", "queue_position", "failure_reason",
        "submitted_at", "placed_at", "started_at", "finished_at", "updated_at",
    )  # fmt: skip
    actions = ["release", "requeue"]
    show_full_result_count = False

    @admin.action(description="Release (stop; frees its placement)")
    def release(self, request: HttpRequest, queryset: QuerySet[Workload]) -> None:
        for w in queryset:
            services.release_workload(w.pk, reason=f"Released by {request.user} in the admin.")
        self.message_user(request, f"Released {queryset.count()} workload(s).")

    @admin.action(description="Requeue (back to pending)")
    def requeue(self, request: HttpRequest, queryset: QuerySet[Workload]) -> None:
        ids = services.requeue_workloads(
            queryset.values_list("pk", flat=True),
            reason=f"Requeued by {request.user} in the admin.",
            code="requeued",
        )
        self.message_user(request, f"Requeued {len(ids)} workload(s).")


class MemberInline(admin.TabularInline):
    model = Workload
    fk_name = "gang"
    extra = 0
    fields = ("name", "state", "pending_reason")
    readonly_fields = fields
    show_change_link = True
    can_delete = False


@admin.register(Gang)
class GangAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "state", "min_available", "timeout_seconds", "created_at")
    list_filter = ("state",)
    search_fields = ("name", "tenant__slug")
    list_select_related = ("tenant",)
    raw_id_fields = ("tenant", "quota", "owner")
    readonly_fields = ("state", "reason", "created_at", "deadline_at", "updated_at")
    inlines = [MemberInline]
    actions = ["cancel"]

    @admin.action(description="Cancel (release every pod)")
    def cancel(self, request: HttpRequest, queryset: QuerySet[Gang]) -> None:
        for g in queryset:
            services.cancel_gang(g.pk, reason=f"Cancelled by {request.user} in the admin.")
        self.message_user(request, f"Cancelled {queryset.count()} job(s).")


class ShareInline(admin.TabularInline):
    model = PlacementGpu
    extra = 0
    readonly_fields = ("gpu", "gpu_milli", "gpu_memory_mib")
    can_delete = False


@admin.register(Placement)
class PlacementAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "workload",
        "tenant",
        "node",
        "cpu_milli",
        "gpu_milli_total",
        "created_at",
        "released_at",
    )
    list_filter = ("node__pool",)
    search_fields = ("workload__name", "node__name", "tenant__slug")
    list_select_related = ("workload", "tenant", "node")
    raw_id_fields = ("workload", "tenant", "node")
    readonly_fields = ("created_at", "released_at")
    inlines = [ShareInline]
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:  # placements come from cycles only
        return False


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    list_display = ("node", "cpu_milli", "memory_mib", "reason")
    raw_id_fields = ("node",)


@admin.register(Shard)
class ShardAdmin(admin.ModelAdmin):
    list_display = ("group", "version", "last_cycle_at", "last_cycle_ms", "last_cycle_placed")
    readonly_fields = ("version", "last_cycle_at", "last_cycle_ms", "last_cycle_placed")
    actions = ["run_cycle"]

    @admin.action(description="Run a scheduling cycle now")
    def run_cycle(self, request: HttpRequest, queryset: QuerySet[Shard]) -> None:
        placed = sum(services.run_cycle(s.group_id).placed for s in queryset)
        self.message_user(request, f"Cycle ran: {placed} workload(s) placed.")


@admin.register(SimulatedPod)
class SimulatedPodAdmin(admin.ModelAdmin):
    list_display = ("workload_id", "name", "node_name", "running_after", "failed")
    list_filter = ("failed",)
    search_fields = ("name", "node_name")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [f.name for f in SimulatedPod._meta.fields]


@admin.register(InvariantAuditRun)
class InvariantAuditRunAdmin(admin.ModelAdmin):
    """Runs of the invariant auditor: read-only (the operators' page /cluster/audit/ shows the last)."""

    list_display = ("started_at", "violations", "duration_ms")
    readonly_fields = ("started_at", "duration_ms", "violations", "counts", "errors", "findings")
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:  # runs come from the auditor only
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(MigReconfiguration)
class MigReconfigurationAdmin(admin.ModelAdmin):
    """Dynamic MIG reconfigurations: read-only, the drive (scheduling.services.mig_reconfig) owns them."""

    list_display = ("gpu", "state", "created_at", "applying_at", "finished_at", "reason")
    list_filter = ("state",)
    search_fields = ("gpu__node__name", "gpu__uuid")
    list_select_related = ("gpu__node",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [f.name for f in MigReconfiguration._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:  # planned by the cycle only
        return False
