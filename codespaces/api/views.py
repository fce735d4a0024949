"""Codespaces API: the twins of the pages, calling the same services."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from codespaces import services
from codespaces.access import can_manage
from codespaces.api.serializers import (
    ROW_RELATED,
    CodespaceCreateSerializer,
    CodespaceEventSerializer,
    CodespaceSerializer,
    CodespaceTemplateSerializer,
    PickerSerializer,
    PreviewRequestSerializer,
    PreviewSerializer,
    SavingsSerializer,
    UtilizationSerializer,
    codespace_rows,
)
from codespaces.delete_preview import (
    codespace_delete_impact,
    deletes_for_someone_else,
    template_retire_impact,
)
from codespaces.models import Codespace, CodespaceTemplate
from codespaces.utilization import utilization_series
from portal.api.concurrency import ETagMixin, expected_version
from portal.api.dry_run import DRY_RUN_PARAMETER, dry_run_requested, dry_run_response
from portal.api.reasons import reason_parameter, request_reason
from portal.choices import OperatorActionKind
from portal.compiled_query import CompiledQuerySet
from portal.errors import Forbidden, InvalidInput, NotFoundError
from portal.numbers import parse_int
from portal.operator_log import MAX_REASON_LENGTH
from portal.scoping import (
    admin_tenant_ids_for,
    current_user,
    is_operator,
    tenant_for_request,
)
from scheduling.api.serializers import StartEstimateSerializer
from scheduling.services.start_estimates import not_waiting_payload, start_estimate_payload


class IsOperatorOrReadOnly(permissions.BasePermission):
    """Members read templates; only platform operators write them."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return bool(request.user and request.user.is_authenticated)
        return is_operator(request.user)


class CodespaceTemplateViewSet(ETagMixin, viewsets.ModelViewSet):
    """Codespace templates: members read the ones open to their teams; operators create, update
    (If-Match with the ETag) and retire them (DELETE sets active=false)."""

    serializer_class = CodespaceTemplateSerializer
    queryset = CodespaceTemplate.objects.all()
    permission_classes = [permissions.IsAuthenticated, IsOperatorOrReadOnly]
    ordering = "name"
    ordering_fields = ["name", "created_at"]
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[CodespaceTemplate]:
        return services.templates_for_user(self.request.user).prefetch_related(
            "presets", "allowed_tenants"
        )

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        template = services.create_template(
            presets=[dict(p) for p in data.pop("presets", [])],
            allowed_tenant_slugs=data.pop("allowed_tenant_slugs", None),
            **data,
        )
        return Response(self.get_serializer(template).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        template = self.get_object()
        version = expected_version(request)
        serializer = self.get_serializer(
            template, data=request.data, partial=kwargs.get("partial", False)
        )
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        presets = data.pop("presets", None)
        template = services.update_template(
            template,
            expected_version=version,
            presets=[dict(p) for p in presets] if presets is not None else None,
            allowed_tenant_slugs=data.pop("allowed_tenant_slugs", None),
            **data,
        )
        response = Response(self.get_serializer(template).data)
        response["ETag"] = f'"{template.version}"'
        return response

    @extend_schema(
        parameters=[reason_parameter(required=False), DRY_RUN_PARAMETER],
        responses={204: None},
        description="Retire the template (developers can no longer create from it; its codespaces "
        "keep working); audited in the activity log. `?dry_run=1` answers what it would do.",
    )
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        template = self.get_object()
        reason = request_reason(request, required=False)
        if dry_run_requested(request):
            return dry_run_response(
                OperatorActionKind.TEMPLATE_RETIRE, template_retire_impact(template)
            )
        services.retire_template(template, actor=request.user, reason=reason)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        parameters=[
            OpenApiParameter("quota", int, description="Quota id (default: your team's first)"),
            OpenApiParameter("tenant", str, description="Team slug (default: your only team)"),
        ],
        responses={200: PickerSerializer},
    )
    @action(detail=True, methods=["get"])
    def presets(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """The slice picker: quota headroom, largest free slice, and for each preset whether it would
        start now or queue (and why)."""
        template = self.get_object()
        tenant = tenant_for_request(
            request.user, request.query_params.get("tenant"), thing="codespace"
        )
        quota_param = request.query_params.get("quota")
        quota_id = parse_int(quota_param, minimum=1) if quota_param else None
        if quota_param and quota_id is None:
            raise InvalidInput("quota: a quota id.", fields={"quota": ["Expected a number."]})
        picker = services.picker_for(tenant, template, quota_id, owner=request.user)
        return Response(PickerSerializer(picker).data)


# What `CodespaceSerializer` reads beyond the codespace's own columns: five joins (the scoped base
# queryset also joins quota and pool, which cost PostgreSQL ~5 ms of planning per list).
LIST_RELATED = ("owner", "tenant", "template", "preset", "workload")


def serializable_codespaces(queryset: QuerySet[Codespace]) -> QuerySet[Codespace]:
    """`queryset` narrowed to what `CodespaceSerializer` renders from an instance: one query, no
    per-row lookups (lists use `codespace_rows`, flat rows without instances)."""
    own = [f.name for f in Codespace._meta.concrete_fields if f.name != "deleted_at"]
    related = [f"{relation}__{column}" for relation, column in ROW_RELATED.values()]
    return queryset.select_related(None).select_related(*LIST_RELATED).only(*own, *related)


LIST_ROWS = codespace_rows(Codespace.objects.all())


class CodespaceViewSet(
    ETagMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Codespaces of your teams (operators: all). `?scope=mine` lists your own, `?scope=team` those of
    the teams you administer. Create queues it; `start`/`stop`/`keep`; DELETE removes it and its home."""

    serializer_class = CodespaceSerializer
    queryset = Codespace.objects.all()
    ordering = "-id"
    ordering_fields = ["created_at", "name", "state"]
    filter_fields = {"state": "state", "tenant": "tenant__slug", "template": "template__name"}

    def get_queryset(self) -> Any:
        user = current_user(self.request)
        # The list is the API's hottest read: its rows come from SQL compiled once per query shape.
        base = CompiledQuerySet("codespaces.api.list", LIST_ROWS) if self.action == "list" else None
        queryset = services.scoped_codespaces(user, base)
        scope = self.request.query_params.get("scope", "")
        if scope == "mine":
            queryset = queryset.filter(owner_id=user.pk)
        elif scope == "team" and not is_operator(user):
            queryset = queryset.filter(tenant_id__in=admin_tenant_ids_for(user))
        if self.action == "retrieve":
            return serializable_codespaces(queryset)
        return queryset

    def _managed(self) -> Codespace:
        codespace = self.get_object()
        if not can_manage(self.request.user, codespace):
            raise Forbidden(
                f"Only the owner of '{codespace.name}', an admin of {codespace.tenant.slug} or an "
                "operator may do that."
            )
        return codespace

    @extend_schema(
        request=CodespaceCreateSerializer,
        responses={201: CodespaceSerializer},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = CodespaceCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        tenant = tenant_for_request(request.user, data.get("tenant"), thing="codespace")
        preset = data.get("preset") or None
        codespace = services.create_codespace(
            user=current_user(request),
            tenant=tenant,
            template=data["template"],
            name=data["name"],
            preset=preset,
            size=None if preset else services.SizeRequest.from_api(data),
            quota=data.get("quota"),
        )
        # The service's instance carries everything the serializer reads (owner, team, template, preset
        # and the new workload as objects, the version it wrote): no re-read.
        return Response(CodespaceSerializer(codespace).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "reason",
                str,
                description="Required when you delete another user's codespace (at most "
                f"{MAX_REASON_LENGTH} characters): the owner reads it in the timeline and the "
                'activity log keeps it. A JSON body {"reason": ...} works too.',
            ),
            DRY_RUN_PARAMETER,
        ],
        responses={204: None},
    )
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        codespace = self._managed()
        reason = request_reason(request, required=deletes_for_someone_else(request.user, codespace))
        if dry_run_requested(request):
            return dry_run_response(
                OperatorActionKind.CODESPACE_DELETE, codespace_delete_impact(codespace)
            )
        services.delete_codespace(codespace, actor=request.user, reason=reason)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: CodespaceSerializer})
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Queue a stopped or failed codespace again (409 in any other state)."""
        codespace = services.start_codespace(self._managed(), actor=request.user)
        codespace.refresh_from_db()
        return Response(CodespaceSerializer(codespace).data)

    @extend_schema(request=None, responses={200: CodespaceSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Release the placement, keep the home volume (409 unless queued/placed/starting/running)."""
        codespace = services.stop_codespace(self._managed(), actor=request.user)
        codespace.refresh_from_db()
        return Response(CodespaceSerializer(codespace).data)

    @extend_schema(request=None, responses={200: CodespaceSerializer})
    @action(detail=True, methods=["post"])
    def keep(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Record activity on a running codespace: clears an idle warning and restarts the idle timer."""
        codespace = services.keep_codespace(self._managed(), actor=request.user)
        codespace.refresh_from_db()
        return Response(CodespaceSerializer(codespace).data)

    @extend_schema(responses={200: StartEstimateSerializer})
    @action(detail=True, methods=["get"], url_path="start-estimate", pagination_class=None)
    def start_estimate(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """When the codespace's workload is likely to start (a range with the reason; null when it is
        not waiting)."""
        codespace = self.get_object()
        workload = codespace.workload
        if workload is None:
            return Response(not_waiting_payload(None, codespace.state))
        return Response(start_estimate_payload(workload))

    @extend_schema(responses={200: CodespaceEventSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)
    def events(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """The timeline, newest first (at most 200 entries)."""
        codespace = self.get_object()
        events = codespace.events.select_related("actor")[:200]
        return Response(CodespaceEventSerializer(events, many=True).data)

    @extend_schema(
        parameters=[OpenApiParameter("minutes", int, description="Window, 1-2880 (default 60)")],
        responses={200: UtilizationSerializer},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def utilization(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """GPU utilization per minute (percent of its own allocation) — the sparkline's data."""
        codespace = self.get_object()
        raw = request.query_params.get("minutes", "60")
        if parse_int(raw, minimum=1, maximum=2880) is None:
            raise InvalidInput(
                "minutes: a whole number from 1 to 2880.",
                fields={"minutes": ["Expected 1-2880."]},
            )
        since = timezone.now() - timedelta(minutes=int(raw))
        empty: dict[str, list[Any]] = {"ts": [], "values": []}
        data = (
            utilization_series([codespace.workload_id], since).get(codespace.workload_id, empty)
            if codespace.workload_id
            else empty
        )
        return Response(UtilizationSerializer(data).data)

    @extend_schema(
        request=PreviewRequestSerializer,
        responses={200: PreviewSerializer},
    )
    @action(detail=False, methods=["post"])
    def preview(self, request: Request, **kwargs: Any) -> Response:
        """Would this size start now? Validation errors (400) or the scheduler's answer; creates nothing."""
        payload = PreviewRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        tenant = tenant_for_request(request.user, data.get("tenant"), thing="codespace")
        answer = services.preview_size(
            tenant,
            template=data["template"],
            quota=data.get("quota"),
            size=services.SizeRequest.from_api(data),
            owner=request.user,
        )
        result = answer.result
        return Response(
            PreviewSerializer(
                {
                    "starts_now": result.starts_now,
                    "code": result.code,
                    "reason": result.reason,
                    "node": result.node,
                    "quota": answer.quota.pk,
                }
            ).data
        )

    @extend_schema(responses={200: SavingsSerializer})
    @action(detail=False, methods=["get"], pagination_class=None)
    def savings(self, request: Request, **kwargs: Any) -> Response:
        """Operators: whole cards without slicing vs cards occupied, and GPU-hours freed by idle stops."""
        if not is_operator(request.user):
            raise NotFoundError("Not found.")
        result = services.savings()
        return Response(
            SavingsSerializer(
                {
                    "codespaces": result.codespaces,
                    "cards_without_slicing": result.cards_without_slicing,
                    "cards_occupied": result.cards_occupied,
                    "cards_saved": result.cards_saved,
                    "percent_saved": result.percent_saved,
                    "gpu_hours_freed_by_idle_stop": result.gpu_hours_freed_by_idle_stop,
                    "per_pool": result.per_pool,
                }
            ).data
        )
