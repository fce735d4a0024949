"""Fairness over time in the API: `quota-loans` (request, approve, decline, cancel; members see the loans
of their tenants' quotas), `quota-budgets` (operators write; members read their own) with `top-up`, and
`GET /api/v1/quotas/{id}/fairness/` (QuotaViewSet.fairness). Views validate the payload and call one
service (quotas.loans, quotas.budgets)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal.errors import InvalidInput
from portal.scoping import is_operator, scope_queryset, tenant_ids_for
from quotas import budgets, loans
from quotas.fairness_report import BudgetView, budget_json, fair_share_json, quota_fairness
from quotas.loans import lender_name
from quotas.models import (
    MAX_BUDGET_GPU_HOURS,
    MAX_LOAN_GPUS,
    BudgetPeriod,
    BudgetWeighting,
    BudgetWindow,
    GpuHourBudget,
    Quota,
    QuotaLoan,
)
from quotas.time_inputs import budget_states
from quotas.user_caps import MAX_GPUS_PER_USER

ERRORS = {
    400: OpenApiResponse(description="Invalid input: {error: {code, message, fields}}"),
    403: OpenApiResponse(description="Not a team admin of that quota's tenant, nor an operator"),
    404: OpenApiResponse(description="Not found (or another tenant's)"),
    409: OpenApiResponse(description="Illegal transition, or someone changed it first"),
}


class QuotaLoanSerializer(serializers.ModelSerializer):
    lender_name = serializers.SerializerMethodField(
        help_text='The lending quota, or "the operators" (lender null: the group\'s unassigned GPUs).'
    )
    borrower_name = serializers.CharField(source="borrower.name", read_only=True)
    requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    decided_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    active = serializers.SerializerMethodField()

    class Meta:
        model = QuotaLoan
        fields = [
            "id",
            "group",
            "lender",
            "lender_name",
            "borrower",
            "borrower_name",
            "gpus",
            "starts_at",
            "ends_at",
            "state",
            "active",
            "reason",
            "requested_by",
            "decided_by",
            "decided_at",
            "decision_note",
            "version",
            "created_at",
        ]
        read_only_fields = fields

    def get_lender_name(self, loan: QuotaLoan) -> str:
        return lender_name(loan)

    def get_active(self, loan: QuotaLoan) -> bool:
        now = timezone.now()
        return loan.state == "approved" and loan.starts_at <= now < loan.ends_at


class LoanRequestSerializer(serializers.Serializer):
    borrower = serializers.IntegerField(min_value=1)
    lender = serializers.IntegerField(
        min_value=1,
        required=False,
        allow_null=True,
        help_text="The sibling quota that lends; omit or null to ask the operators.",
    )
    gpus = serializers.IntegerField(min_value=1, max_value=MAX_LOAN_GPUS)
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500)


class LoanDecisionSerializer(serializers.Serializer):
    version = serializers.IntegerField(required=False, min_value=1)
    note = serializers.CharField(required=False, allow_blank=True, max_length=500)


def _quota_for(pk: int, field: str) -> Quota:
    """The quota `pk` (the service decides whether the caller may act for it)."""
    quota = Quota.objects.select_related("group", "tenant").filter(pk=pk).first()
    if quota is None:
        raise InvalidInput(f"{field}: no such quota.", fields={field: ["No such quota."]})
    return quota


class QuotaLoanViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Quota loans: N GPUs of min from one quota to a sibling for a window."""

    serializer_class = QuotaLoanSerializer
    queryset = QuotaLoan.objects.all()
    ordering = "-id"
    ordering_fields = ["id", "created_at", "starts_at"]
    filter_fields = {"state": "state", "group": "group_id"}

    def get_queryset(self) -> QuerySet[QuotaLoan]:
        queryset = QuotaLoan.objects.select_related(
            "lender", "borrower", "requested_by", "decided_by"
        )
        if is_operator(self.request.user):
            return queryset
        tenants = tenant_ids_for(self.request.user)
        return queryset.filter(
            Q(lender__tenant_id__in=tenants) | Q(borrower__tenant_id__in=tenants)
        )

    @extend_schema(request=LoanRequestSerializer, responses={201: QuotaLoanSerializer, **ERRORS})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = LoanRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        borrower = _quota_for(data["borrower"], "borrower")
        lender = _quota_for(data["lender"], "lender") if data.get("lender") else None
        loan = loans.request_loan(
            borrower=borrower,
            lender=lender,
            gpus=data["gpus"],
            starts_at=data["starts_at"],
            ends_at=data["ends_at"],
            reason=data.get("reason", ""),
            actor=request.user,
        )
        return Response(QuotaLoanSerializer(loan).data, status=status.HTTP_201_CREATED)

    def _decide(self, request: Request, verb: str) -> Response:
        loan = self.get_object()
        payload = LoanDecisionSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        if verb == "cancel":
            saved = loans.cancel_loan(
                loan, actor=request.user, expected_version=data.get("version")
            )
        else:
            saved = loans.decide_loan(
                loan,
                approve=verb == "approve",
                actor=request.user,
                expected_version=data.get("version"),
                note=data.get("note", ""),
            )
        return Response(QuotaLoanSerializer(saved).data)

    @extend_schema(request=LoanDecisionSerializer, responses={200: QuotaLoanSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        return self._decide(request, "approve")

    @extend_schema(request=LoanDecisionSerializer, responses={200: QuotaLoanSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def decline(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        return self._decide(request, "decline")

    @extend_schema(request=LoanDecisionSerializer, responses={200: QuotaLoanSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        return self._decide(request, "cancel")


class BudgetSerializer(serializers.Serializer):
    """A budget with its state in the current period."""

    id = serializers.IntegerField()
    quota = serializers.IntegerField()
    period = serializers.ChoiceField(choices=BudgetPeriod.choices)
    window = serializers.ChoiceField(choices=BudgetWindow.choices)
    gpu_model = serializers.CharField()
    weighting = serializers.ChoiceField(choices=BudgetWeighting.choices)
    limit_gpu_hours = serializers.CharField()
    hard = serializers.BooleanField()
    used = serializers.FloatField()
    limit_with_top_ups = serializers.FloatField()
    percent = serializers.IntegerField()
    exhausted = serializers.BooleanField()
    explanation = serializers.CharField()


class BudgetCreateSerializer(serializers.Serializer):
    quota = serializers.IntegerField(min_value=1)
    period = serializers.ChoiceField(choices=BudgetPeriod.choices, default=BudgetPeriod.WEEK)
    window = serializers.ChoiceField(choices=BudgetWindow.choices, default=BudgetWindow.CALENDAR)
    gpu_model = serializers.CharField(required=False, allow_blank=True, max_length=63, default="")
    weighting = serializers.ChoiceField(
        choices=BudgetWeighting.choices, default=BudgetWeighting.HOURS
    )
    limit_gpu_hours = serializers.DecimalField(
        max_digits=12, decimal_places=2, min_value=0, max_value=MAX_BUDGET_GPU_HOURS
    )
    hard = serializers.BooleanField(default=False)


class TopUpSerializer(serializers.Serializer):
    gpu_hours = serializers.DecimalField(
        max_digits=12, decimal_places=2, min_value=0, max_value=MAX_BUDGET_GPU_HOURS
    )
    reason = serializers.CharField(max_length=500)


def _budget_bodies(rows: Sequence[GpuHourBudget]) -> list[dict[str, Any]]:
    """The budgets with their state now: one usage read per group, not per budget."""
    states = budget_states(rows, timezone.now())
    return [budget_json(BudgetView(budget, states[int(budget.pk)])) for budget in rows]


def _budget_body(budget: GpuHourBudget) -> dict[str, Any]:
    return _budget_bodies([budget])[0]


class QuotaBudgetViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """GPU-hour budgets per quota and period, with their state now. Operators write."""

    serializer_class = BudgetSerializer
    queryset = GpuHourBudget.objects.all()
    ordering = "id"
    ordering_fields = ["id"]
    filter_fields = {"quota": "quota_id"}

    def get_queryset(self) -> QuerySet[GpuHourBudget]:
        return scope_queryset(
            GpuHourBudget.objects.select_related("quota__group").prefetch_related("top_ups"),
            self.request.user,
            "quota__tenant",
        )

    @extend_schema(responses={200: BudgetSerializer(many=True)})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        rows = _budget_bodies(page if page is not None else list(queryset))
        if page is not None:
            return self.get_paginated_response(rows)
        return Response(rows)

    @extend_schema(responses={200: BudgetSerializer, 404: ERRORS[404]})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(_budget_body(self.get_object()))

    @extend_schema(request=BudgetCreateSerializer, responses={201: BudgetSerializer, **ERRORS})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = BudgetCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        quota = _quota_for(data.pop("quota"), "quota")
        budget = budgets.create_budget(quota, data, actor=request.user)
        return Response(_budget_body(budget), status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None, **ERRORS})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        budgets.delete_budget(self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=TopUpSerializer, responses={200: BudgetSerializer, **ERRORS})
    @action(detail=True, methods=["post"], url_path="top-up")
    def top_up(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        budget = self.get_object()
        payload = TopUpSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        top_up = budgets.top_up_budget(
            budget, data["gpu_hours"], actor=request.user, reason=data["reason"]
        )
        return Response(_budget_body(top_up.budget))


class UserCapSerializer(serializers.Serializer):
    max_gpus_per_user = serializers.IntegerField(
        required=True, allow_null=True, min_value=1, max_value=MAX_GPUS_PER_USER
    )


class QuotaFairnessSerializer(serializers.Serializer):
    fair_share = serializers.JSONField(allow_null=True)
    budgets = BudgetSerializer(many=True)
    loans = QuotaLoanSerializer(many=True)
    notices = serializers.ListField(child=serializers.DictField())


def fairness_body(quota: Quota) -> dict[str, Any]:
    """The body of GET /api/v1/quotas/{id}/fairness/."""
    report = quota_fairness(quota)
    return {
        "fair_share": fair_share_json(report.fair_share),
        "budgets": [budget_json(view) for view in report.budgets],
        "loans": QuotaLoanSerializer(report.loans, many=True).data,
        "notices": [
            {"kind": n.kind, "message": n.message, "recipients": n.recipients, "at": n.created_at}
            for n in report.notices
        ],
    }
