"""Scheduling API: inventory (read by every member; operator actions by operators only), placements and
workloads (tenant-scoped), and gang jobs (submit, read, cancel)."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from core.units import MILLI_PER_GPU
from portal.api.dry_run import DRY_RUN_PARAMETER, dry_run_requested, dry_run_response
from portal.choices import OperatorActionKind as Kind
from portal.errors import Forbidden, InvalidInput
from portal.scoping import (
    TenantScopedQuerysetMixin,
    can_admin_tenant,
    current_user,
    is_operator,
    tenant_for_request,
)
from quotas.models import Quota
from scheduling import services
from scheduling.api.serializers import (
    CordonSerializer,
    DrainSerializer,
    DryRunSerializer,
    GpuHealthSerializer,
    GpuSerializer,
    JobCreateSerializer,
    JobSerializer,
    MigReconfigurationSerializer,
    NodeDetailSerializer,
    NodeSerializer,
    OperatorResultSerializer,
    OptionalReasonSerializer,
    PlacementSerializer,
    StartEstimateSerializer,
    WorkloadSerializer,
)
from scheduling.models import Gang, Gpu, MigReconfiguration, Node, Placement, Workload
from scheduling.services.operator_impact import gpu_action_impact, node_action_impact
from scheduling.services.start_estimates import start_estimate_payload


def _or_dry_run(serializer: type[Serializer]) -> PolymorphicProxySerializer:
    """The answer of an operator action: its result, or with ?dry_run=1 the impact."""
    return PolymorphicProxySerializer(
        component_name=f"{serializer.__name__.removesuffix('Serializer')}OrDryRun",
        serializers=[serializer, DryRunSerializer],
        resource_type_field_name=None,
    )


def _require_operator(request: Request) -> None:
    if not is_operator(request.user):
        raise Forbidden("Only platform operators can change the cluster inventory.")


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Cluster nodes (every signed-in user may read the inventory). Operators cordon, uncordon, drain and
    (simulated cluster) fail nodes."""

    queryset = Node.objects.prefetch_related("gpus").order_by("name")
    serializer_class = NodeSerializer
    ordering = "name"
    ordering_fields = ["name", "pool", "cpu_milli"]
    filter_fields = {"pool": "pool", "cordoned": "cordoned", "healthy": "healthy"}
    search_fields = ["name"]

    def get_serializer_class(self) -> Any:
        return NodeDetailSerializer if self.action != "list" else NodeSerializer

    @extend_schema(
        request=CordonSerializer,
        parameters=[DRY_RUN_PARAMETER],
        responses={200: _or_dry_run(NodeDetailSerializer)},
    )
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Take no new work on the node; `reason` is required."""
        _require_operator(request)
        node = self.get_object()
        reason = _reason(CordonSerializer, request)
        if dry_run_requested(request):
            return dry_run_response(Kind.CORDON, node_action_impact(node, Kind.CORDON))
        node = services.cordon_node(node.pk, reason=reason, actor=request.user)
        return Response(NodeDetailSerializer(node, context=self.get_serializer_context()).data)

    @extend_schema(
        request=OptionalReasonSerializer,
        parameters=[DRY_RUN_PARAMETER],
        responses={200: _or_dry_run(NodeDetailSerializer)},
    )
    @action(detail=True, methods=["post"])
    def uncordon(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        _require_operator(request)
        node = self.get_object()
        reason = _reason(OptionalReasonSerializer, request)
        if dry_run_requested(request):
            return dry_run_response(Kind.UNCORDON, node_action_impact(node, Kind.UNCORDON))
        node = services.uncordon_node(node.pk, reason=reason, actor=request.user)
        return Response(NodeDetailSerializer(node, context=self.get_serializer_context()).data)

    @extend_schema(
        request=DrainSerializer,
        parameters=[DRY_RUN_PARAMETER],
        responses={200: _or_dry_run(OperatorResultSerializer)},
    )
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Cordon the node and requeue its workloads; `reason` is required (users see it)."""
        _require_operator(request)
        node = self.get_object()
        reason = _reason(DrainSerializer, request)
        if dry_run_requested(request):
            return dry_run_response(Kind.DRAIN, node_action_impact(node, Kind.DRAIN))
        return Response(
            {"requeued": services.drain_node(node.pk, reason=reason, actor=request.user)}
        )

    @extend_schema(
        request=OptionalReasonSerializer,
        parameters=[DRY_RUN_PARAMETER],
        responses={200: _or_dry_run(OperatorResultSerializer)},
    )
    @action(detail=True, methods=["post"])
    def fail(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Simulated cluster only: the node fails, its workloads are requeued."""
        _require_operator(request)
        _require_simulated()
        node = self.get_object()
        reason = _reason(OptionalReasonSerializer, request)
        if dry_run_requested(request):
            return dry_run_response(Kind.NODE_FAILURE, node_action_impact(node, Kind.NODE_FAILURE))
        return Response(
            {"requeued": services.fail_node(node.pk, reason=reason, actor=request.user)}
        )


def _reason(serializer: type[Serializer], request: Request) -> str:
    payload = serializer(data=request.data)
    payload.is_valid(raise_exception=True)
    return str(payload.validated_data.get("reason", ""))


def _require_simulated() -> None:
    from django.conf import settings

    if settings.TESSERA_BACKEND != "simulated":
        raise InvalidInput("Failures can only be injected into the simulated cluster.")


class GpuViewSet(viewsets.ReadOnlyModelViewSet):
    """GPUs with the slices placed on them. Operators set health and (simulated) inject failures."""

    queryset = Gpu.objects.select_related("node").order_by("node__name", "index")
    serializer_class = GpuSerializer
    ordering = "id"
    filter_fields = {"node": "node__name", "model": "model", "healthy": "healthy"}

    def get_serializer_context(self) -> dict[str, Any]:
        ctx = super().get_serializer_context()
        return ctx

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        from scheduling.services.cluster_view import gpu_shares

        qs = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(qs)
        items = list(page if page is not None else qs)
        ctx = {
            **self.get_serializer_context(),
            "shares_by_gpu": gpu_shares([g.pk for g in items], request.user),
        }
        data = GpuSerializer(items, many=True, context=ctx).data
        return self.get_paginated_response(data) if page is not None else Response(data)

    @extend_schema(
        request=GpuHealthSerializer,
        parameters=[DRY_RUN_PARAMETER],
        responses={200: _or_dry_run(OperatorResultSerializer)},
    )
    @action(detail=True, methods=["post"])
    def health(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Mark the GPU healthy or unhealthy; `reason` is required to mark it unhealthy."""
        _require_operator(request)
        gpu = self.get_object()
        payload = GpuHealthSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        healthy = payload.validated_data["healthy"]
        if dry_run_requested(request):
            kind = Kind.GPU_HEALTHY if healthy else Kind.GPU_UNHEALTHY
            return dry_run_response(kind, gpu_action_impact(gpu, kind))
        requeued = services.set_gpu_health(
            gpu.pk,
            healthy=healthy,
            reason=payload.validated_data.get("reason", ""),
            actor=request.user,
        )
        return Response({"requeued": requeued})

    @extend_schema(
        request=OptionalReasonSerializer,
        parameters=[DRY_RUN_PARAMETER],
        responses={200: _or_dry_run(OperatorResultSerializer)},
    )
    @action(detail=True, methods=["post"])
    def fail(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Simulated cluster only: the GPU fails; exactly the workloads on it are requeued."""
        _require_operator(request)
        _require_simulated()
        gpu = self.get_object()
        reason = _reason(OptionalReasonSerializer, request)
        if dry_run_requested(request):
            return dry_run_response(Kind.GPU_FAILURE, gpu_action_impact(gpu, Kind.GPU_FAILURE))
        return Response({"requeued": services.fail_gpu(gpu.pk, reason=reason, actor=request.user)})


class MigReconfigurationViewSet(viewsets.ReadOnlyModelViewSet):
    """Dynamic MIG reconfigurations, newest first (inventory: read by every member); filter by `node`
    and `state` (planned, applying, ready, failed, cancelled)."""

    queryset = (
        MigReconfiguration.objects.select_related("gpu__node")
        .prefetch_related("placements")
        .order_by("-created_at", "-id")
    )
    serializer_class = MigReconfigurationSerializer
    filter_fields = {"node": "gpu__node__name", "state": "state", "gpu": "gpu_id"}


class PlacementViewSet(TenantScopedQuerysetMixin, viewsets.ReadOnlyModelViewSet):
    """Placements of your tenants' workloads (active and released)."""

    queryset = Placement.objects.select_related("node", "tenant").prefetch_related(
        "gpu_shares__gpu"
    )
    serializer_class = PlacementSerializer
    filter_fields = {"workload": "workload_id", "node": "node__name", "tenant": "tenant__slug"}

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        qs = super().filter_queryset(queryset)
        active = self.request.query_params.get("active")
        if active in ("true", "false"):
            qs = qs.filter(released_at__isnull=(active == "true"))
        return qs


_ACTIVE_PLACEMENTS = Prefetch(
    "placements",
    queryset=Placement.objects.filter(released_at__isnull=True)
    .select_related("node", "tenant")
    .prefetch_related("gpu_shares__gpu"),
)


class WorkloadViewSet(TenantScopedQuerysetMixin, viewsets.ReadOnlyModelViewSet):
    """Workloads of your tenants (codespaces and job pods): state, why it waits, where it runs."""

    queryset = Workload.objects.select_related("tenant", "owner").prefetch_related(
        _ACTIVE_PLACEMENTS
    )
    serializer_class = WorkloadSerializer
    filter_fields = {
        "state": "state",
        "kind": "kind",
        "tenant": "tenant__slug",
        "quota": "quota_id",
        "gang": "gang_id",
    }
    search_fields = ["name"]
    ordering_fields = ["submitted_at", "priority", "queue_position"]

    @extend_schema(responses={200: StartEstimateSerializer})
    @action(detail=True, methods=["get"], url_path="start-estimate")
    def start_estimate(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """When the workload is likely to start, as a range with the reason (null when not waiting)."""
        workload = self.get_object()
        return Response(start_estimate_payload(workload))


def _quota_for(tenant: Any, quota_id: int | None) -> Quota:
    quotas = Quota.objects.filter(tenant=tenant).select_related("group")
    if quota_id is not None:
        quota = quotas.filter(pk=quota_id).first()
        if quota is None:
            raise InvalidInput(
                f"Quota {quota_id} is not a quota of team {tenant.slug}.",
                fields={"quota": ["Choose one of your team's quotas."]},
            )
        return quota
    mine = list(quotas[:2])
    if len(mine) != 1:
        every = list(quotas.order_by("pk"))
        if not every:
            raise InvalidInput(
                f"Team {tenant.slug} has no quota; ask a platform operator for one.",
                fields={"quota": [f"Team {tenant.slug} has no quota."]},
            )
        choices = ", ".join(f"{quota.pk} ({quota.group.name})" for quota in every)
        raise InvalidInput(
            f"Team {tenant.slug} has {len(every)} quotas; name the one to charge: {choices}.",
            fields={"quota": [f"Required: one of {choices}."]},
        )
    return mine[0]


class JobViewSet(
    TenantScopedQuerysetMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Gang jobs: N pods with the same resources, placed all together (at least `min_available`) or not
    at all; they time out after `timeout_seconds` without a complete placement. Per-pod status and
    placement; cancel."""

    queryset = Gang.objects.select_related("tenant", "owner").prefetch_related(
        Prefetch(
            "members", queryset=Workload.objects.order_by("pk").prefetch_related(_ACTIVE_PLACEMENTS)
        )
    )
    serializer_class = JobSerializer
    filter_fields = {"state": "state", "tenant": "tenant__slug"}
    search_fields = ["name"]

    @extend_schema(request=JobCreateSerializer, responses={201: JobSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = JobCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        user = current_user(request)
        tenant = tenant_for_request(user, data.get("tenant"), thing="job")
        quota = _quota_for(tenant, data.get("quota"))
        member = dict(data["member"])
        if member.get("gpu_count") and "gpu_milli" not in member:
            member["gpu_milli"] = MILLI_PER_GPU
        gang = services.submit_gang(
            tenant=tenant,
            quota=quota,
            name=data["name"],
            owner=user,
            members=[member] * data["pods"],
            min_available=data.get("min_available") or data["pods"],
            timeout_seconds=data["timeout_seconds"],
            priority=data["priority"],
            preemptible=data["preemptible"],
            topology_level=data["topology_level"],
            topology_mode=data["topology_mode"],
            movable=data["movable"],
        )
        gang = self.get_queryset().get(pk=gang.pk)
        return Response(JobSerializer(gang).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        gang = self.get_object()
        user = current_user(request)
        if not (gang.owner_id == user.pk or can_admin_tenant(user, gang.tenant_id)):
            raise Forbidden("Only the job's owner or a team admin can cancel it.")
        services.cancel_gang(gang.pk, reason=f"Cancelled by {user.get_username()}.")
        return Response(JobSerializer(self.get_queryset().get(pk=gang.pk)).data)
