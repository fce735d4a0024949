"""Recorded demand export (operators): the workloads submitted in the last N days with shape, submit,
start and end, as JSON or CSV (`scheduling.services.demand`; the simulator's input)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from portal.errors import Forbidden, InvalidInput
from portal.numbers import parse_int
from portal.scoping import is_operator
from quotas.models import QuotaGroup
from scheduling.services.demand import MAX_DAYS, demand_csv, recorded_demand


class DemandRecordSerializer(serializers.Serializer):
    workload_id = serializers.IntegerField()
    kind = serializers.CharField()
    tenant = serializers.CharField()
    quota_id = serializers.IntegerField()
    group = serializers.CharField()
    cpu_milli = serializers.IntegerField()
    memory_mib = serializers.IntegerField()
    gpu_count = serializers.IntegerField()
    gpu_milli = serializers.IntegerField()
    gpu_memory_mib = serializers.IntegerField()
    gpu_models = serializers.CharField(allow_blank=True, help_text="Allowed models, '|'-separated.")
    priority = serializers.IntegerField()
    submitted_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


def _window(request: Request) -> tuple[int, QuotaGroup | None, str]:
    raw_days = request.query_params.get("days", "30")
    days = parse_int(raw_days, minimum=1, maximum=MAX_DAYS)
    if days is None:
        raise InvalidInput(
            f"days: a whole number from 1 to {MAX_DAYS}.",
            fields={"days": [f"Expected 1-{MAX_DAYS}, got {raw_days[:20]!r}."]},
        )
    group = None
    raw_group = request.query_params.get("group")
    if raw_group:
        group_id = parse_int(raw_group, minimum=1)
        group = QuotaGroup.objects.filter(pk=group_id).first() if group_id else None
        if group is None:
            raise InvalidInput(
                "group: no such node pool.", fields={"group": ["Give a quota group id."]}
            )
    output = request.query_params.get("output", "json")
    if output not in ("json", "csv"):
        raise InvalidInput("output: json or csv.", fields={"output": ["Expected json or csv."]})
    return days, group, output


class DemandViewSet(viewsets.ViewSet):
    """Operators: the recorded demand of the last `days` (1-90, default 30), optionally of one pool."""

    @extend_schema(
        parameters=[
            OpenApiParameter("days", int, description=f"Window in days, 1-{MAX_DAYS} (default 30)"),
            OpenApiParameter("group", int, description="Only this quota group (node pool)"),
            OpenApiParameter("output", str, enum=["json", "csv"], description="Default json"),
        ],
        responses={200: DemandRecordSerializer(many=True)},
    )
    def list(self, request: Request, **kwargs: Any) -> Response | HttpResponse:
        if not is_operator(request.user):
            raise Forbidden("Only platform operators can export recorded demand.")
        days, group, output = _window(request)
        end = timezone.now()
        records = recorded_demand(end - timedelta(days=days), end, group)
        if output == "csv":
            response = HttpResponse(demand_csv(records), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="demand-{days}d.csv"'
            return response
        return Response(DemandRecordSerializer(records, many=True).data)
