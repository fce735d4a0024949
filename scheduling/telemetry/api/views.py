"""Usage API: allocation and utilization time series per tenant, quota and pool (read-only)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from portal.models import Tenant
from portal.scoping import scope_queryset, tenants_for
from quotas.models import Quota, QuotaGroup
from scheduling.telemetry import series
from scheduling.telemetry.api.serializers import (
    PoolUsageSerializer,
    RangeQuerySerializer,
    TenantUsageSerializer,
)

RANGE_PARAMETER = OpenApiParameter(
    "range",
    str,
    enum=list(series.RANGES),
    description="Time range ending now; up to 48h reads minute rows, longer ranges hour rows.",
)


def _window(request: Request) -> series.Window:
    query = RangeQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    return series.window(query.validated_data["range"], timezone.now())


def _tenant_payload(usage: series.TenantUsage, win: series.Window, quota: Quota | None) -> Any:
    return TenantUsageSerializer(
        {
            "tenant": usage.tenant,
            "quota": quota.name if quota else None,
            "resolution": win.resolution,
            "start": win.start,
            "end": win.end,
            "allocated_gpu_hours": usage.allocated_gpu_hours,
            "used_gpu_hours": usage.used_gpu_hours,
            "idle_gpu_hours": usage.idle_gpu_hours,
            "utilization_percent": usage.utilization_percent,
            "points": usage.points,
            "wasting": usage.wasting,
        }
    ).data


class TenantUsageViewSet(viewsets.GenericViewSet):
    """A tenant's allocation vs quota and utilization over time (members: their tenants; operators: all)."""

    queryset = Tenant.objects.none()
    lookup_field = "slug"
    pagination_class = None
    serializer_class = TenantUsageSerializer

    def get_queryset(self) -> QuerySet[Tenant]:
        return tenants_for(self.request.user)

    @extend_schema(parameters=[RANGE_PARAMETER], responses={200: TenantUsageSerializer})
    def retrieve(self, request: Request, slug: str | None = None, **kwargs: Any) -> Response:
        tenant = self.get_object()
        win = _window(request)
        return Response(_tenant_payload(series.tenant_usage(tenant, win), win, None))


class QuotaUsageViewSet(viewsets.GenericViewSet):
    """One quota's allocation vs min / max / runtime share and utilization over time."""

    queryset = Quota.objects.none()
    pagination_class = None
    serializer_class = TenantUsageSerializer

    def get_queryset(self) -> QuerySet[Quota]:
        return scope_queryset(Quota.objects.select_related("tenant"), self.request.user)

    @extend_schema(parameters=[RANGE_PARAMETER], responses={200: TenantUsageSerializer})
    def retrieve(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        quota = self.get_object()
        win = _window(request)
        usage = series.tenant_usage(quota.tenant, win, quota=quota)
        return Response(_tenant_payload(usage, win, quota))


class PoolUsageViewSet(viewsets.GenericViewSet):
    """A pool's allocation (cards and milli), utilization, pending queue and waits over time."""

    queryset = QuotaGroup.objects.all()
    lookup_field = "name"
    pagination_class = None
    serializer_class = PoolUsageSerializer

    @extend_schema(parameters=[RANGE_PARAMETER], responses={200: PoolUsageSerializer})
    def retrieve(self, request: Request, name: str | None = None, **kwargs: Any) -> Response:
        pool = self.get_object()
        win = _window(request)
        points = series.pool_series(win, [pool]).get(pool.name, [])
        return Response(
            PoolUsageSerializer(
                {
                    "pool": pool.name,
                    "resolution": win.resolution,
                    "start": win.start,
                    "end": win.end,
                    "points": points,
                }
            ).data
        )
