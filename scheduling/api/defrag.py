"""Safe defragmentation (operators): preview a plan of a pool, read it, apply it
(`scheduling.services.defrag`). `POST /defrag/plans/` previews (nothing moves), `POST
/defrag/plans/{id}/apply/` applies once (a retry returns the same answer)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal.errors import Forbidden, InvalidInput, NotFoundError
from portal.scoping import is_operator
from scheduling.models import DefragMove, DefragPlan
from scheduling.services.defrag import apply_defrag, preview_defrag

LIST_LIMIT = 50
PLAN_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="Plan id")


class DefragPreviewSerializer(serializers.Serializer):
    group = serializers.IntegerField(
        min_value=1, max_value=2**63 - 1, help_text="Quota group (node pool) id."
    )


class DefragMoveSerializer(serializers.ModelSerializer):
    workload_name = serializers.CharField(source="workload.name", read_only=True)
    kind = serializers.CharField(source="workload.kind", read_only=True)
    tenant = serializers.CharField(source="tenant.slug", read_only=True)

    class Meta:
        model = DefragMove
        fields = [
            "id",
            "workload",
            "workload_name",
            "kind",
            "tenant",
            "from_node",
            "from_gpus",
            "to_node",
            "to_gpus",
            "cost_seconds",
            "running_seconds",
            "reason",
            "moved_at",
        ]
        read_only_fields = fields


class DefragUnlockSerializer(serializers.Serializer):
    workload = serializers.IntegerField()
    name = serializers.CharField()
    shape = serializers.CharField()
    node = serializers.CharField()
    gpus = serializers.ListField(child=serializers.IntegerField())


class DefragReasonSerializer(serializers.Serializer):
    reason = serializers.CharField()
    count = serializers.IntegerField()


class DefragConsideredSerializer(serializers.Serializer):
    """What the plan looked at and why work stayed (empty for plans made before it was recorded)."""

    summary = serializers.CharField(required=False)
    waiting = serializers.IntegerField(required=False, help_text="Waiting requests looked at")
    running = serializers.IntegerField(required=False, help_text="Running workloads looked at")
    movable = serializers.IntegerField(
        required=False, help_text="Of those, the ones the policy lets move"
    )
    kept = DefragReasonSerializer(
        many=True, required=False, help_text="Why the policy kept the others in place"
    )
    planner = DefragReasonSerializer(
        many=True, required=False, help_text="What the planner refused, and how often"
    )


class DefragPlanSerializer(serializers.ModelSerializer):
    moves = DefragMoveSerializer(many=True, read_only=True)
    unlocks = DefragUnlockSerializer(many=True, read_only=True)
    considered = DefragConsideredSerializer(read_only=True)
    group_name = serializers.CharField(source="group.name", read_only=True)

    class Meta:
        model = DefragPlan
        fields = [
            "id",
            "group",
            "group_name",
            "state",
            "trigger",
            "value",
            "freed_whole_gpus",
            "freed_whole_nodes",
            "cost_seconds",
            "unlocks",
            "considered",
            "moves",
            "result",
            "error",
            "created_at",
            "expires_at",
            "applied_at",
        ]
        read_only_fields = fields


def _operator_only(request: Request) -> None:
    if not is_operator(request.user):
        raise Forbidden("Only platform operators can plan or apply defragmentation.")


def _plan(pk: Any) -> DefragPlan:
    try:
        key = int(pk)
    except (TypeError, ValueError) as exc:
        raise NotFoundError(f"Defragmentation plan {str(pk)[:20]!r} does not exist.") from exc
    plan = DefragPlan.objects.select_related("group").filter(pk=key).first()
    if plan is None:
        raise NotFoundError(f"Defragmentation plan {key} does not exist.")
    return plan


def _body(plan: DefragPlan) -> dict[str, Any]:
    fresh = (
        DefragPlan.objects.select_related("group")
        .prefetch_related("moves__workload", "moves__tenant")
        .get(pk=plan.pk)
    )
    return dict(DefragPlanSerializer(fresh).data)


class DefragPlanViewSet(viewsets.ViewSet):
    """Operators: preview a defragmentation plan of a pool, read plans, apply one."""

    @extend_schema(responses={200: DefragPlanSerializer(many=True)})
    def list(self, request: Request, **kwargs: Any) -> Response:
        _operator_only(request)
        plans = (
            DefragPlan.objects.select_related("group")
            .prefetch_related("moves__workload", "moves__tenant")
            .order_by("-created_at", "-id")[:LIST_LIMIT]
        )
        return Response(DefragPlanSerializer(plans, many=True).data)

    @extend_schema(request=DefragPreviewSerializer, responses={201: DefragPlanSerializer})
    def create(self, request: Request, **kwargs: Any) -> Response:
        _operator_only(request)
        form = DefragPreviewSerializer(data=request.data)
        if not form.is_valid():
            raise InvalidInput("The defragmentation request is not valid.", fields=form.errors)
        plan = preview_defrag(form.validated_data["group"], actor=request.user)
        return Response(_body(plan), status=201)

    @extend_schema(parameters=[PLAN_ID], responses={200: DefragPlanSerializer})
    def retrieve(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        _operator_only(request)
        return Response(_body(_plan(pk)))

    @extend_schema(parameters=[PLAN_ID], request=None, responses={200: DefragPlanSerializer})
    @action(detail=True, methods=["post"])
    def apply(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        _operator_only(request)
        plan = apply_defrag(_plan(pk).pk, actor=request.user)
        return Response(_body(plan))
