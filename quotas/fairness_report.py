"""Fairness over time for one quota, as the quota page and `GET /api/v1/quotas/{id}/fairness/` show it:
its decayed fair share in plain words, its budgets in the current period, its loans (both directions,
with history) and the notices its team admins got. Read-only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from quotas.fairness import BudgetState, FairShare
from quotas.models import GpuHourBudget, LoanState, Quota, QuotaLoan, QuotaNotice
from quotas.time_inputs import group_fair_shares, quota_budget_states

NOTICES_SHOWN = 20
LOANS_SHOWN = 50


@dataclass(frozen=True)
class BudgetView:
    budget: GpuHourBudget
    state: BudgetState

    def sentence(self) -> str:
        scope = f"{self.budget.gpu_model} GPUs" if self.budget.gpu_model else "all GPU models"
        stop = (
            "nothing new starts (hard)"
            if self.budget.hard
            else "new borrowing stops, work within min still starts"
        )
        return f"{self.state.numbers()} ({self.state.percent} %, {scope}); at 100 % {stop}."


@dataclass(frozen=True)
class QuotaFairness:
    fair_share: FairShare | None
    budgets: tuple[BudgetView, ...]
    loans: tuple[QuotaLoan, ...]
    notices: tuple[QuotaNotice, ...]
    now: datetime

    def loan_active(self, loan: QuotaLoan) -> bool:
        return loan.state == LoanState.APPROVED and loan.starts_at <= self.now < loan.ends_at


def quota_fairness(quota: Quota, now: datetime | None = None) -> QuotaFairness:
    now = now or timezone.now()
    fair = group_fair_shares(quota.group, now).get(int(quota.pk))
    budgets = list(quota.budgets.prefetch_related("top_ups").order_by("id"))
    states = quota_budget_states(budgets, int(quota.group_id), now)
    loans = (
        QuotaLoan.objects.filter(Q(lender=quota) | Q(borrower=quota))
        .select_related("lender", "borrower", "requested_by", "decided_by")
        .order_by("-created_at", "-id")[:LOANS_SHOWN]
    )
    return QuotaFairness(
        fair_share=fair,
        budgets=tuple(BudgetView(b, states[int(b.pk)]) for b in budgets),
        loans=tuple(loans),
        notices=tuple(quota.notices.order_by("-created_at", "-id")[:NOTICES_SHOWN]),
        now=now,
    )


def fair_share_json(fair: FairShare | None) -> dict[str, Any] | None:
    if fair is None:
        return None
    return {
        "half_life_hours": fair.half_life_hours,
        "usage_gpu_hours": round(fair.usage_gpu_hours, 3),
        "share_gpu_hours": round(fair.share_gpu_hours, 3),
        "percent_of_share": fair.percent,
        "borrow_tier": fair.tier,
        "explanation": fair.sentence(),
    }


def budget_json(view: BudgetView) -> dict[str, Any]:
    b, state = view.budget, view.state
    return {
        "id": b.pk,
        "quota": b.quota_id,
        "period": b.period,
        "window": b.window,
        "gpu_model": b.gpu_model,
        "weighting": b.weighting,
        "limit_gpu_hours": str(b.limit_gpu_hours),
        "hard": b.hard,
        "used": round(state.used, 3),
        "limit_with_top_ups": round(state.limit, 3),
        "percent": state.percent,
        "exhausted": state.exhausted,
        "explanation": view.sentence(),
    }
