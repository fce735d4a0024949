"""What-if capacity planner (operators): replay a pool's recorded demand with a change, side by side
(`scheduling.services.whatif`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from core.placement import POLICIES
from portal.errors import Forbidden, InvalidInput
from portal.scoping import is_operator
from quotas.models import QuotaGroup
from quotas.sharing import MAX_MIG_PROFILES, MAX_TIMESLICE_REPLICAS, SharingMode
from scheduling.services.demand import MAX_DAYS
from scheduling.services.trace_upload import MAX_TRACE_BYTES, parse_trace
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

    sharing_mode = serializers.ChoiceField(
        choices=SharingMode.choices,
        required=False,
        help_text="The pool's sharing mode to try (absent = as it is).",
    )
    mig_profiles = serializers.ListField(
        child=serializers.CharField(max_length=16),
        max_length=MAX_MIG_PROFILES,
        default=list,
        help_text="With sharing_mode=mig: the profiles the cards offer (1g.10gb, ...).",
    )
    timeslice_replicas = serializers.IntegerField(
        min_value=1, max_value=MAX_TIMESLICE_REPLICAS, default=1
    )
    trace = serializers.FileField(
        required=False,
        max_length=255,
        help_text="Instead of the recorded demand: a CSV in the openb pod-list format (multipart; "
        f"at most {MAX_TRACE_BYTES // 1_000_000} MB).",
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
    sharing = serializers.CharField(help_text="The pool's sharing mode in this run.")
    refused = serializers.IntegerField(help_text="Requests the sharing mode would refuse.")
    team_waits_p95 = serializers.DictField(child=serializers.FloatField())
    team_never_started = serializers.DictField(child=serializers.IntegerField())
    hours = serializers.ListField(child=serializers.FloatField())
    allocated_gpus = serializers.ListField(child=serializers.FloatField())
    waiting = serializers.ListField(child=serializers.IntegerField())


class WhatIfReportSerializer(serializers.Serializer):
    demand = serializers.ChoiceField(choices=["recorded", "uploaded"], source="source")
    days = serializers.IntegerField()
    requests = serializers.IntegerField()
    recorded_waits_p95 = serializers.FloatField()
    baseline = WhatIfRunSerializer()
    changed = WhatIfRunSerializer()


class WhatIfViewSet(viewsets.ViewSet):
    """Operators: `POST` a change to a pool and get both replays of its recorded demand (or of an
    uploaded openb trace, multipart)."""

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
        values: dict[str, Any] = {
            f.name: data[f.name] for f in dataclasses.fields(WhatIfChange) if f.name in data
        }
        values["mig_profiles"] = tuple(values.get("mig_profiles", ()))
        upload = data.get("trace")
        trace = None if upload is None else parse_trace(upload.read(MAX_TRACE_BYTES + 1))
        report = run_whatif(group, data["days"], WhatIfChange(**values), trace=trace)
        return Response(WhatIfReportSerializer(report).data)
