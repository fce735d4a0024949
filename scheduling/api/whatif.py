"""What-if capacity planner (operators): replay a pool's recorded demand with a change, side by side
(`scheduling.services.whatif`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from portal.errors import Forbidden, InvalidInput
from portal.scoping import is_operator
from quotas.models import QuotaGroup
from scheduling.engine import POLICIES
from scheduling.services.demand import MAX_DAYS
from scheduling.services.whatif import MAX_NODES_CHANGED, WhatIfChange, run_whatif


class WhatIfRequestSerializer(serializers.Serializer):
    group = serializers.IntegerField(min_value=1, help_text="Quota group (node pool) id.")
    days = serializers.IntegerField(min_value=1, max_value=MAX_DAYS, default=30)
    add_model = serializers.CharField(max_length=64, allow_blank=True, default="")
    add_count = serializers.IntegerField(min_value=0, max_value=MAX_NODES_CHANGED, default=0)
    remove_model = serializers.CharField(max_length=64, allow_blank=True, default="")
    remove_count = serializers.IntegerField(min_value=0, max_value=MAX_NODES_CHANGED, default=0)
    policy = serializers.ChoiceField(choices=["", *POLICIES], default="", allow_blank=True)
    team_gpus = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=100_000),
        default=dict,
        help_text="Tenant slug -> GPUs it may hold at once.",
    )

    def validate_team_gpus(self, value: dict[str, int]) -> dict[str, int]:
        if len(value) > 200 or any(len(k) > 64 for k in value):
            raise serializers.ValidationError("At most 200 teams, slugs of at most 64 characters.")
        return value


class WaitsSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    p50 = serializers.FloatField()
    p95 = serializers.FloatField()
    p99 = serializers.FloatField()


class WhatIfRunSerializer(serializers.Serializer):
    name = serializers.CharField(source="label")
    policy = serializers.CharField()
    nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    allocation_pct = serializers.FloatField(source="summary.allocation_pct")
    never_started = serializers.IntegerField(source="summary.never_started")
    queue_mean = serializers.FloatField(source="summary.queue_mean")
    waits = WaitsSerializer(source="summary.waits")
    team_waits_p95 = serializers.DictField(child=serializers.FloatField())
    team_never_started = serializers.DictField(child=serializers.IntegerField())
    hours = serializers.ListField(child=serializers.FloatField())
    allocated_gpus = serializers.ListField(child=serializers.FloatField())
    waiting = serializers.ListField(child=serializers.IntegerField())


class WhatIfReportSerializer(serializers.Serializer):
    days = serializers.IntegerField()
    requests = serializers.IntegerField()
    recorded_waits_p95 = serializers.FloatField()
    baseline = WhatIfRunSerializer()
    changed = WhatIfRunSerializer()


class WhatIfViewSet(viewsets.ViewSet):
    """Operators: `POST` a change to a pool and get both replays of its recorded demand."""

    @extend_schema(request=WhatIfRequestSerializer, responses={200: WhatIfReportSerializer})
    def create(self, request: Request, **kwargs: Any) -> Response:
        if not is_operator(request.user):
            raise Forbidden("Only platform operators can run the capacity planner.")
        form = WhatIfRequestSerializer(data=request.data)
        if not form.is_valid():
            raise InvalidInput("The what-if request is not valid.", fields=form.errors)
        data = form.validated_data
        group = QuotaGroup.objects.filter(pk=data["group"]).first()
        if group is None:
            raise InvalidInput("group: no such node pool.", fields={"group": ["Unknown id."]})
        change = WhatIfChange(
            **{k: data[k] for k in (f.name for f in dataclasses.fields(WhatIfChange))}
        )
        report = run_whatif(group, data["days"], change)
        return Response(WhatIfReportSerializer(report).data)
