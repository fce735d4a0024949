"""Forms of the quota page's "Fairness over time" card: ask for a loan, decide one, add a budget, top
one up. Type checks only; every rule is the service's (quotas.loans, quotas.budgets)."""

from __future__ import annotations

from typing import Any

from django import forms

from quotas.models import (
    MAX_BUDGET_GPU_HOURS,
    MAX_LOAN_GPUS,
    MAX_RECLAIM_NOTICE_SECONDS,
    BudgetPeriod,
    BudgetWeighting,
    BudgetWindow,
    Quota,
)

DATETIME = forms.DateTimeInput(attrs={"type": "datetime-local"})


class LoanRequestForm(forms.Form):
    lender = forms.ModelChoiceField(
        queryset=Quota.objects.none(),
        required=False,
        empty_label="The operators (the group's unassigned GPUs)",
        label="From quota",
    )
    gpus = forms.IntegerField(min_value=1, max_value=MAX_LOAN_GPUS, label="GPUs of min")
    starts_at = forms.DateTimeField(widget=DATETIME, label="From (UTC)")
    ends_at = forms.DateTimeField(widget=DATETIME, label="Until (UTC)")
    reason = forms.CharField(required=False, max_length=500)

    def __init__(self, *args: Any, borrower: Quota, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        siblings = Quota.objects.filter(group_id=borrower.group_id).exclude(pk=borrower.pk)
        lender = self.fields["lender"]
        assert isinstance(lender, forms.ModelChoiceField)
        lender.queryset = siblings.order_by("name")


class LoanDecisionForm(forms.Form):
    loan = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    decision = forms.ChoiceField(
        choices=[("approve", "Approve"), ("decline", "Decline"), ("cancel", "Cancel")]
    )
    note = forms.CharField(required=False, max_length=500)


class BudgetForm(forms.Form):
    period = forms.ChoiceField(choices=BudgetPeriod.choices)
    window = forms.ChoiceField(choices=BudgetWindow.choices)
    gpu_model = forms.CharField(required=False, max_length=63, label="GPU model (empty = all)")
    weighting = forms.ChoiceField(choices=BudgetWeighting.choices)
    limit_gpu_hours = forms.DecimalField(
        min_value=0, max_value=MAX_BUDGET_GPU_HOURS, decimal_places=2, label="GPU-hours"
    )
    hard = forms.BooleanField(required=False, label="Hard (nothing new starts at 100 %)")


class TopUpForm(forms.Form):
    budget = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    gpu_hours = forms.DecimalField(
        min_value=0, max_value=MAX_BUDGET_GPU_HOURS, decimal_places=2, label="GPU-hours"
    )
    reason = forms.CharField(max_length=500)


class UserCapForm(forms.Form):
    max_gpus_per_user = forms.IntegerField(
        required=False, min_value=1, max_value=10_000, label="Most GPUs per person (empty = no cap)"
    )


class ReclaimSettingsForm(forms.Form):
    reclaim_notice_seconds = forms.IntegerField(
        min_value=0,
        max_value=MAX_RECLAIM_NOTICE_SECONDS,
        label="Notice before reclaim, seconds (the whole group; 0 = at once)",
    )
    checkpoint_webhook_url = forms.URLField(
        required=False,
        max_length=500,
        assume_scheme="https",
        label="Checkpoint webhook URL (empty = none)",
    )
    equal_borrowing_share = forms.BooleanField(
        required=False, label="Share the team's borrowed GPUs equally among its active users"
    )
