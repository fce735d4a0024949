"""Quotas API: `quota-groups` and `quotas`. Read for members (scoped to their tenants), write for operators.

Views validate the payload and call one service; the same services back the pages and the admin. Updates
need `If-Match: "<version>"` (428 without, 412 when stale); the ETag of a single quota or group is its
version.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.concurrency import ETagMixin, etag_for, expected_version
from portal.api.dry_run import DRY_RUN_PARAMETER, dry_run_requested, dry_run_response
from portal.api.pagination import NewestFirstCursorPagination
from portal.api.reasons import reason_parameter, request_reason
from portal.choices import OperatorActionKind
from portal.errors import Forbidden, InvalidInput
from portal.models import Tenant
from portal.scoping import is_operator, scope_queryset, tenant_ids_for
from quotas import services
from quotas.api.fairness import QuotaFairnessSerializer, UserCapSerializer, fairness_body
from quotas.api.reclaim import (
    ReclaimNoticeSerializer,
    ReclaimNoticeSettingSerializer,
    ReclaimSettingsSerializer,
    reclaim_notices_body,
)
from quotas.api.serializers import (
    NewQuotaWhatIfSerializer,
    QuotaChangeSerializer,
    QuotaCreateSerializer,
    QuotaGroupCreateSerializer,
    QuotaGroupSerializer,
    QuotaGroupWriteSerializer,
    QuotaSerializer,
    QuotaUpdateSerializer,
    QuotaWriteFieldsSerializer,
    SavedQuotaSerializer,
    WhatIfRowSerializer,
    what_if_row,
)
from quotas.delete_preview import group_delete_impact, quota_delete_impact
from quotas.models import Quota, QuotaChange, QuotaGroup, ReclaimNoticeState
from quotas.reclaim_notices import set_reclaim_notice, set_reclaim_settings
from quotas.user_caps import set_user_cap

ERRORS = {
    400: OpenApiResponse(description="Invalid input: {error: {code, message, fields}}"),
    403: OpenApiResponse(description="Only platform operators change quotas"),
    404: OpenApiResponse(description="Not found (or another tenant's)"),
    412: OpenApiResponse(description="Stale If-Match: someone else saved first"),
    428: OpenApiResponse(description="If-Match header missing"),
}


def _require_operator(request: Request) -> None:
    if not is_operator(request.user):
        raise Forbidden("Only platform operators change quotas and quota groups.")


def _with_etag(response: Response, version: int) -> Response:
    response["ETag"] = etag_for(version)
    return response


class QuotaGroupViewSet(ETagMixin, viewsets.ModelViewSet):
    """Quota groups (node pools) with capacity and allocation. Members see the groups they hold a quota in."""

    serializer_class = QuotaGroupSerializer
    queryset = QuotaGroup.objects.all()
    ordering = "name"
    ordering_fields = ["name", "created_at"]
    search_fields = ["name", "description"]
    http_method_names = ["get", "post", "patch", "put", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[QuotaGroup]:
        queryset = QuotaGroup.objects.all()
        if is_operator(self.request.user):
            return queryset
        return queryset.filter(quotas__tenant_id__in=tenant_ids_for(self.request.user)).distinct()

    @extend_schema(
        request=QuotaGroupCreateSerializer, responses={201: QuotaGroupSerializer, **ERRORS}
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        _require_operator(request)
        payload = QuotaGroupCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        saved = services.create_group(actor=request.user, note=data.pop("note", ""), **data)
        body = QuotaGroupSerializer(saved.obj, context=self.get_serializer_context()).data
        return _with_etag(Response(body, status=status.HTTP_201_CREATED), saved.obj.version)

    @extend_schema(
        request=QuotaGroupWriteSerializer, responses={200: QuotaGroupSerializer, **ERRORS}
    )
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        group = self.get_object()
        _require_operator(request)
        version = expected_version(request)
        payload = QuotaGroupWriteSerializer(data=request.data, partial=True)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        saved = services.update_group(
            group, expected_version=version, actor=request.user, note=data.pop("note", ""), **data
        )
        body = QuotaGroupSerializer(saved.obj, context=self.get_serializer_context()).data
        return _with_etag(Response(body), saved.obj.version)

    @extend_schema(
        request=QuotaGroupWriteSerializer, responses={200: QuotaGroupSerializer, **ERRORS}
    )
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.update(request, *args, **kwargs)

    @extend_schema(
        request=ReclaimNoticeSettingSerializer,
        responses={200: QuotaGroupSerializer, **ERRORS},
        description="Polite reclaim: seconds of notice borrowed work gets before it is stopped "
        "(0 = at once, today's behaviour). Operators only; audited.",
    )
    @action(detail=True, methods=["post"], url_path="reclaim-notice")
    def reclaim_notice(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        group = self.get_object()
        payload = ReclaimNoticeSettingSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        saved = set_reclaim_notice(
            group, payload.validated_data["reclaim_notice_seconds"], actor=request.user
        )
        return _with_etag(
            Response(QuotaGroupSerializer(saved, context=self.get_serializer_context()).data),
            saved.version,
        )

    @extend_schema(
        request=NewQuotaWhatIfSerializer,
        responses={200: WhatIfRowSerializer(many=True), **ERRORS},
        description="Every quota's runtime share before and after adding a quota for `tenant` to this "
        "group, for the current demand. Nothing is written.",
    )
    @action(detail=True, methods=["post"], url_path="what-if")
    def what_if(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        group = self.get_object()
        _require_operator(request)
        payload = NewQuotaWhatIfSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        tenant = Tenant.objects.filter(slug=data.pop("tenant")).first()
        if tenant is None:
            raise InvalidInput("tenant: no such tenant.", fields={"tenant": ["No such tenant."]})
        name = data.pop("name", None)
        rows = services.what_if(group, None, data, tenant=tenant, name=name)
        return Response([what_if_row(row) for row in rows])

    @extend_schema(
        parameters=[reason_parameter(required=False), DRY_RUN_PARAMETER],
        responses={204: None, **ERRORS},
        description="Delete an empty group (409 while it has quotas); audited in the activity log. "
        "`?dry_run=1` answers what the delete would do.",
    )
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        group = self.get_object()
        _require_operator(request)
        reason = request_reason(request, required=False)
        if dry_run_requested(request):
            return dry_run_response(
                OperatorActionKind.QUOTA_GROUP_DELETE, group_delete_impact(group)
            )
        services.delete_group(
            group, expected_version=expected_version(request), actor=request.user, reason=reason
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class QuotaViewSet(ETagMixin, viewsets.ModelViewSet):
    """Quotas (a tenant's leaf in a group) with their runtime share, borrowed capacity and headroom."""

    serializer_class = QuotaSerializer
    queryset = Quota.objects.select_related("group", "tenant")
    ordering = "id"
    ordering_fields = ["id", "name", "created_at"]
    search_fields = ["name"]
    filter_fields = {"group": "group_id", "tenant": "tenant__slug"}
    http_method_names = ["get", "post", "patch", "put", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Quota]:
        return scope_queryset(
            Quota.objects.select_related("group", "tenant"), self.request.user, "tenant"
        )

    @extend_schema(request=QuotaCreateSerializer, responses={201: SavedQuotaSerializer, **ERRORS})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        _require_operator(request)
        payload = QuotaCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        tenant = Tenant.objects.filter(slug=data.pop("tenant")).first()
        if tenant is None:
            raise InvalidInput("tenant: no such tenant.", fields={"tenant": ["No such tenant."]})
        saved = services.create_quota(
            group=data.pop("group"),
            tenant=tenant,
            name=data.pop("name", None),
            actor=request.user,
            note=data.pop("note", ""),
            **data,
        )
        context = {**self.get_serializer_context(), "warnings": saved.warnings}
        body = SavedQuotaSerializer(saved.obj, context=context).data
        return _with_etag(Response(body, status=status.HTTP_201_CREATED), saved.obj.version)

    @extend_schema(request=QuotaUpdateSerializer, responses={200: SavedQuotaSerializer, **ERRORS})
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        _require_operator(request)
        version = expected_version(request)
        payload = QuotaUpdateSerializer(data=request.data, partial=True)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        saved = services.update_quota(
            quota, expected_version=version, actor=request.user, note=data.pop("note", ""), **data
        )
        context = {**self.get_serializer_context(), "warnings": saved.warnings}
        return _with_etag(
            Response(SavedQuotaSerializer(saved.obj, context=context).data), saved.obj.version
        )

    @extend_schema(request=QuotaUpdateSerializer, responses={200: SavedQuotaSerializer, **ERRORS})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.update(request, *args, **kwargs)

    @extend_schema(
        parameters=[reason_parameter(required=False), DRY_RUN_PARAMETER],
        responses={204: None, **ERRORS},
        description="Delete a quota no workload references (409 otherwise); audited in its history "
        "and the activity log. `?dry_run=1` answers what the delete would do.",
    )
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        _require_operator(request)
        reason = request_reason(request, required=False)
        if dry_run_requested(request):
            return dry_run_response(OperatorActionKind.QUOTA_DELETE, quota_delete_impact(quota))
        services.delete_quota(
            quota, expected_version=expected_version(request), actor=request.user, note=reason
        )
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        request=QuotaWriteFieldsSerializer,
        responses={200: WhatIfRowSerializer(many=True), **ERRORS},
        description="Every sibling's runtime share before and after the proposed change, for the "
        "current demand. Nothing is written.",
    )
    @action(detail=True, methods=["post"], url_path="what-if")
    def what_if(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        quota = self.get_object()
        _require_operator(request)
        payload = QuotaWriteFieldsSerializer(data=request.data, partial=True)
        payload.is_valid(raise_exception=True)
        rows = services.what_if(quota.group, quota, dict(payload.validated_data))
        return Response([what_if_row(row) for row in rows])

    @extend_schema(
        responses={200: QuotaFairnessSerializer, 404: ERRORS[404]},
        description="Fairness over time: the quota's decayed fair share (null when its group has it "
        "off), its GPU-hour budgets in the current period, its loans and its team admins' notices.",
    )
    @action(detail=True, methods=["get"], filter_backends=[])
    def fairness(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        return Response(fairness_body(self.get_object()))

    @extend_schema(
        request=UserCapSerializer,
        responses={200: QuotaSerializer, **ERRORS},
        description="Set (or clear with null) the most GPUs one person of the team may hold at once. "
        "Operators only; audited.",
    )
    @action(detail=True, methods=["post"], url_path="user-cap")
    def user_cap(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        quota = self.get_object()
        payload = UserCapSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        saved = set_user_cap(
            quota, payload.validated_data.get("max_gpus_per_user"), actor=request.user
        )
        return _with_etag(
            Response(QuotaSerializer(saved, context=self.get_serializer_context()).data),
            saved.version,
        )

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "state",
                str,
                enum=list(ReclaimNoticeState.values),
                required=False,
                description="Only notices in this state.",
            )
        ],
        responses={200: ReclaimNoticeSerializer(many=True), 400: ERRORS[400], 404: ERRORS[404]},
        description="The reclaim plan that concerns this quota (what, whose, when): notices given "
        "to its borrowed work, and to other teams' work stopped for it; live ones first.",
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="reclaim-notices",
        filter_backends=[],
        pagination_class=None,
    )
    def reclaim_notices(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        quota = self.get_object()
        state = request.query_params.get("state", "")
        if state and state not in ReclaimNoticeState.values:
            message = f"One of {', '.join(ReclaimNoticeState.values)}."
            raise InvalidInput(f"state: {message}", fields={"state": [message]})
        return Response(reclaim_notices_body(quota, state=state))

    @extend_schema(
        request=ReclaimSettingsSerializer,
        responses={200: QuotaSerializer, **ERRORS},
        description="Set the quota's checkpoint webhook (polite reclaim) and/or its equal share of "
        "borrowing among active users. Operators only; audited.",
    )
    @action(detail=True, methods=["post"], url_path="reclaim-settings")
    def reclaim_settings(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        quota = self.get_object()
        payload = ReclaimSettingsSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        saved = set_reclaim_settings(
            quota,
            checkpoint_webhook_url=payload.validated_data.get("checkpoint_webhook_url"),
            equal_borrowing_share=payload.validated_data.get("equal_borrowing_share"),
            actor=request.user,
        )
        return _with_etag(
            Response(QuotaSerializer(saved, context=self.get_serializer_context()).data),
            saved.version,
        )

    @extend_schema(
        responses={200: QuotaChangeSerializer(many=True), 404: ERRORS[404]},
        description="The quota's changes, newest first, a cursor page at a time (`?limit=`).",
    )
    @action(detail=True, methods=["get"], filter_backends=[])
    def history(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        quota = self.get_object()
        changes = QuotaChange.objects.filter(quota=quota).select_related("actor")
        paginator = NewestFirstCursorPagination()
        page = paginator.paginate_queryset(changes, request, view=self)
        return paginator.get_paginated_response(QuotaChangeSerializer(page, many=True).data)
