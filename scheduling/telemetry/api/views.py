"""Usage API: allocation and utilization time series per tenant, quota and pool (read-only)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.models import Tenant
from portal.scoping import is_operator, scope_queryset, tenants_for
from quotas.models import Quota, QuotaGroup
from scheduling.telemetry import billing, series
from scheduling.telemetry.api.serializers import (
    BillQuerySerializer,
    BillSerializer,
    PoolUsageSerializer,
    RangeQuerySerializer,
    TenantUsageSerializer,
)
from scheduling.telemetry.bill import Bill, BillLine

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


def _bill_for(request: Request) -> tuple[Bill, list[BillLine], bool]:
    query = BillQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    now = timezone.now()
    bill = billing.monthly_bill(query.validated_data.get("month") or f"{now:%Y-%m}", now)
    operator = is_operator(request.user)
    slugs = None if operator else set(tenants_for(request.user).values_list("slug", flat=True))
    return bill, billing.visible_lines(bill, slugs), operator


MONTH_PARAMETER = OpenApiParameter(
    "month", str, required=False, description="YYYY-MM (UTC); default: the current month"
)


class BillView(APIView):
    """The month's GPU bill: every GPU's physical cost split into teams' shares, platform overhead,
    idle and unallocated, allocation-based and usage-based side by side; the parts add up to the
    physical cost to the cent. Operators see every line, team members their teams' lines."""

    @extend_schema(parameters=[MONTH_PARAMETER], responses={200: BillSerializer})
    def get(self, request: Request, **kwargs: Any) -> Response:
        bill, lines, operator = _bill_for(request)
        payload = {
            "period": bill.period,
            "currency": bill.currency,
            "physical_cost": bill.physical_cost if operator else None,
            "lines": lines,
        }
        return Response(BillSerializer(payload).data)


class BillCsvView(APIView):
    """The same bill as CSV (one row per GPU model and part)."""

    @extend_schema(parameters=[MONTH_PARAMETER], responses={(200, "text/csv"): OpenApiTypes.STR})
    def get(self, request: Request, **kwargs: Any) -> HttpResponse:
        bill, lines, _operator = _bill_for(request)
        response = HttpResponse(billing.bill_csv(bill, lines), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="gpu-bill-{bill.period}.csv"'
        return response
