from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import services
from portal.api.serializers import (
    ApiTokenCreateSerializer,
    ApiTokenSerializer,
    IssuedTokenSerializer,
    MeSerializer,
    OperatorActionSerializer,
    TenantSerializer,
)
from portal.choices import OperatorActionKind
from portal.errors import Forbidden, InvalidInput
from portal.forms import ActivityFilterForm
from portal.models import ApiToken, OperatorAction, Tenant
from portal.operator_log import LogFilters, filter_operator_actions
from portal.scoping import current_user, is_operator, tenants_for


class TenantViewSet(viewsets.ReadOnlyModelViewSet):
    """The tenants (teams) the caller belongs to; operators see all."""

    serializer_class = TenantSerializer
    queryset = Tenant.objects.none()  # for the schema; real rows: get_queryset
    ordering = "slug"
    ordering_fields = ["slug", "name", "created_at"]

    def get_queryset(self) -> QuerySet[Tenant]:
        return tenants_for(self.request.user)


class ApiTokenViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """The caller's own personal API tokens: create (the raw value is returned once), list, revoke."""

    serializer_class = ApiTokenSerializer
    queryset = (
        ApiToken.objects.none()
    )  # typed path parameter for the schema; real rows: get_queryset

    def get_queryset(self) -> QuerySet[ApiToken]:
        return ApiToken.objects.filter(user=current_user(self.request))

    @extend_schema(request=ApiTokenCreateSerializer, responses={201: IssuedTokenSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = ApiTokenCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        asked = payload.validated_data
        issued = services.issue_token(
            request.user,
            name=asked["name"],
            expires_at=asked.get("expires_at"),
            # an explicit null asks for a token that never expires; leaving it out, the default
            never_expires="expires_at" in asked and asked["expires_at"] is None,
            minted_by=request.auth if isinstance(request.auth, ApiToken) else None,
        )
        data = IssuedTokenSerializer(issued.token).data
        data["token"] = issued.raw
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: ApiTokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        token = self.get_object()
        token = services.revoke_token(request.user, token.pk)
        return Response(ApiTokenSerializer(token).data)


class _SingleObjectSchema(AutoSchema):
    """`me` is routed as a list action but answers one object."""

    def _is_list_view(self, serializer: Any = None) -> bool:
        return False


class MeViewSet(viewsets.ViewSet):
    """Who the caller is, and the tenants they act in."""

    schema = _SingleObjectSchema()

    @extend_schema(responses={200: MeSerializer})
    def list(self, request: Request, **kwargs: Any) -> Response:
        user = request.user
        data = {
            "id": user.pk,
            "username": user.get_username(),
            "is_operator": is_operator(user),
            "memberships": user.memberships.select_related("tenant"),  # type: ignore[union-attr]
        }
        return Response(MeSerializer(data).data)


_LOG_FILTERS = [
    OpenApiParameter("actor", str, description="Operator's username (exact, any case)."),
    OpenApiParameter("action", str, enum=[k for k, _ in OperatorActionKind.choices]),
    OpenApiParameter(
        "target", str, description="Target name contains (node, GPU, codespace, ...)."
    ),
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="At or after (ISO 8601)."),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="Before (ISO 8601)."),
]


@extend_schema_view(list=extend_schema(parameters=_LOG_FILTERS))
class OperatorActionViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Operators only: the audit trail of operator actions, newest first, filtered like the
    activity log page (the same form validates both)."""

    serializer_class = OperatorActionSerializer
    queryset = OperatorAction.objects.none()  # for the schema; real rows: get_queryset
    filter_backends: list[Any] = []
    ordering = ("-created_at", "-id")

    def get_queryset(self) -> QuerySet[OperatorAction]:
        if not is_operator(self.request.user):
            raise Forbidden("Only platform operators can read the activity log.")
        form = ActivityFilterForm(self.request.query_params)
        if not form.is_valid():
            fields = {name: list(errors) for name, errors in form.errors.items()}
            first = next(iter(fields))
            raise InvalidInput(f"{first}: {fields[first][0]}", fields=fields)
        return filter_operator_actions(form.filters() if form.cleaned_data else LogFilters())


class ApiRootView(APIView):
    """GET /api/v1/: where the documentation and the schema are, for a person or a client finding its
    way (public: it lists links, no data)."""

    permission_classes = [AllowAny]
    authentication_classes: list[type] = []

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        def link(name: str) -> str:
            return request.build_absolute_uri(reverse(name, kwargs={"version": "v1"}))

        return Response(
            {
                "name": "Tessera API",
                "version": "v1",
                "docs": link("api-docs"),
                "redoc": link("api-redoc"),
                "schema": link("api-schema"),
                "authentication": "Authorization: Bearer <token> (create one at /account/tokens/)",
            }
        )
