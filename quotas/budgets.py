"""GPU-hour budgets: create, change, delete (operators; audited in QuotaChange), top-ups (operators;
audited in portal.OperatorAction), and the 80 % / 100 % notices to the team admins (periodic).

What a budget does to admission is in `quotas.admission` (rule 4); its state in the current period is
read by `quotas.time_inputs` (`budget_state`). Notices are `QuotaNotice` rows, shown on the quota page
and in the API, and mailed to the tenant admins with an e-mail address (`send_mail`, the project's mail
backend; nothing is mailed when none has one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.choices import OperatorActionKind, OperatorTargetKind
from portal.errors import Forbidden, InvalidInput, NotFoundError
from portal.operator_log import ActionImpact, clean_reason, record_operator_action
from portal.periodic import ItemFailures, run_each
from portal.scoping import is_operator, signed_in_or_none
from quotas.history import notify_team_admins, record_quota_change
from quotas.models import (
    MAX_BUDGET_GPU_HOURS,
    BudgetAlert,
    BudgetPeriod,
    BudgetTopUp,
    BudgetWeighting,
    BudgetWindow,
    ChangeAction,
    GpuHourBudget,
    Quota,
)
from quotas.time_inputs import period_bounds, quota_budget_states

logger = logging.getLogger(__name__)

THRESHOLDS = (80, 100)
"""Percentages of a budget at which the team admins are told (once per period each)."""

BUDGET_FIELDS = ("period", "window", "gpu_model", "weighting", "limit_gpu_hours", "hard")


def _choice(values: dict[str, Any], name: str, choices: Any, default: str) -> str:
    raw = values.get(name, default)
    allowed = [str(c) for c in choices.values]
    if raw not in allowed:
        raise InvalidInput.for_field(name, f"One of {', '.join(allowed)}.")
    return str(raw)


def clean_gpu_hours(value: Any, name: str = "limit_gpu_hours") -> Decimal:
    """A number of GPU-hours: 0..MAX_BUDGET_GPU_HOURS with at most 2 decimals; InvalidInput otherwise."""
    if isinstance(value, bool) or value in (None, ""):
        raise InvalidInput.for_field(name, "A number of GPU-hours is required.")
    try:
        number = Decimal(str(value))
    except InvalidOperation as exc:
        raise InvalidInput.for_field(name, "A number of GPU-hours, e.g. 400 or 12.5.") from exc
    if not number.is_finite() or number < 0 or number > MAX_BUDGET_GPU_HOURS:
        raise InvalidInput.for_field(name, f"From 0 to {MAX_BUDGET_GPU_HOURS} GPU-hours.")
    if number != number.quantize(Decimal("0.01")):
        raise InvalidInput.for_field(name, "At most 2 decimals.")
    return number


def clean_budget(values: dict[str, Any]) -> dict[str, Any]:
    """The budget fields of `values`, checked (InvalidInput naming the field)."""
    unknown = sorted(set(values) - set(BUDGET_FIELDS))
    if unknown:
        raise InvalidInput.for_field(unknown[0], "Unknown field.")
    model = values.get("gpu_model", "")
    if not isinstance(model, str) or len(model.strip()) > 63:
        raise InvalidInput.for_field(
            "gpu_model", "A GPU model name of at most 63 characters (empty = all)."
        )
    hard = values.get("hard", False)
    if not isinstance(hard, bool):
        raise InvalidInput.for_field("hard", "Must be true or false.")
    return {
        "period": _choice(values, "period", BudgetPeriod, BudgetPeriod.WEEK),
        "window": _choice(values, "window", BudgetWindow, BudgetWindow.CALENDAR),
        "weighting": _choice(values, "weighting", BudgetWeighting, BudgetWeighting.HOURS),
        "gpu_model": model.strip(),
        "limit_gpu_hours": clean_gpu_hours(values.get("limit_gpu_hours")),
        "hard": hard,
    }


def _require_operator(actor: Any) -> None:
    if not is_operator(actor):
        raise Forbidden("Only platform operators set GPU-hour budgets and grant top-ups.")


def budget_fields(budget: GpuHourBudget) -> dict[str, Any]:
    return {
        "period": budget.period,
        "window": budget.window,
        "gpu_model": budget.gpu_model,
        "weighting": budget.weighting,
        "limit_gpu_hours": str(budget.limit_gpu_hours),
        "hard": budget.hard,
    }


def _audit_budget(
    quota: Quota, actor: Any, action: str, before: Any, after: Any, note: str = ""
) -> None:
    record_quota_change(
        quota, subject="budget", action=action, actor=actor, before=before, after=after, note=note
    )


def _lock_budget(budget: GpuHourBudget) -> GpuHourBudget:
    """Row-lock the budget again; NotFoundError when it (or its quota) was deleted since it was read."""
    try:
        return (
            GpuHourBudget.objects.select_for_update()
            .select_related("quota__group", "quota__tenant")
            .get(pk=budget.pk)
        )
    except GpuHourBudget.DoesNotExist as exc:
        raise NotFoundError(
            f"GPU-hour budget {budget.pk} no longer exists; someone deleted it (or its quota)."
        ) from exc


@transaction.atomic
def create_budget(quota: Quota, values: dict[str, Any], *, actor: Any) -> GpuHourBudget:
    """Add a budget to `quota` (operators). Audited (QuotaChange, subject "budget")."""
    _require_operator(actor)
    cleaned = clean_budget(values)
    budget = GpuHourBudget.objects.create(quota=quota, **cleaned)
    _audit_budget(quota, actor, ChangeAction.CREATED, None, budget_fields(budget))
    return budget


@transaction.atomic
def delete_budget(budget: GpuHourBudget, *, actor: Any) -> None:
    """Remove a budget (operators). Audited."""
    _require_operator(actor)
    locked = _lock_budget(budget)
    _audit_budget(locked.quota, actor, ChangeAction.DELETED, budget_fields(locked), None)
    locked.delete()


@transaction.atomic
def top_up_budget(
    budget: GpuHourBudget, gpu_hours: Any, *, actor: Any, reason: Any = ""
) -> BudgetTopUp:
    """Add `gpu_hours` to `budget` for its current period (operators). Audited in the operators'
    activity log (portal.OperatorAction `budget_top_up`) in the same transaction."""
    _require_operator(actor)
    amount = clean_gpu_hours(gpu_hours, "gpu_hours")
    if amount <= 0:
        raise InvalidInput.for_field("gpu_hours", "A top-up adds more than 0 GPU-hours.")
    text = clean_reason(reason, required=True)
    locked = _lock_budget(budget)
    now = timezone.now()
    start, label = period_bounds(locked.period, locked.window, now)
    top_up = BudgetTopUp.objects.create(
        budget=locked,
        period_start=start,
        gpu_hours=amount,
        actor=signed_in_or_none(actor),
        reason=text,
    )
    quota = locked.quota
    record_operator_action(
        actor=actor,
        action=OperatorActionKind.BUDGET_TOP_UP,
        target_kind=OperatorTargetKind.QUOTA,
        target_id=int(quota.pk),
        target_name=f"{quota.group.name}/{quota.name}",
        impact=ActionImpact(
            summary=f"Added {amount} GPU-hours to the budget of {quota.name} {label}.",
            teams=(quota.tenant.slug,),
            details={"budget": int(locked.pk), "gpu_hours": str(amount)},
        ),
        reason=text,
    )
    return top_up


# ------------------------------------------------------------------------------------------ notices


@dataclass
class AlertReport:
    checked: int = 0
    sent: int = 0
    failures: ItemFailures | None = None


def _alert_one(budget: GpuHourBudget, now: datetime, report: AlertReport) -> None:
    state = quota_budget_states([budget], int(budget.quota.group_id), now)[int(budget.pk)]
    start, _ = period_bounds(budget.period, budget.window, now)
    if budget.window == BudgetWindow.ROLLING:
        start = start.replace(hour=0, minute=0, second=0, microsecond=0)  # one notice a day at most
    report.checked += 1
    for threshold in THRESHOLDS:
        if state.percent < threshold:
            continue
        try:
            with transaction.atomic():
                BudgetAlert.objects.create(budget=budget, period_start=start, threshold=threshold)
        except IntegrityError:
            continue  # already told this period
        if threshold >= 100:
            what = (
                "nothing new starts (hard budget)"
                if state.hard
                else "new borrowing stops; work within min still starts"
            )
        else:
            what = "new borrowing stops at 100 %"
        notify_team_admins(
            budget.quota,
            f"budget_{threshold}",
            f"Quota {budget.quota.name} reached {state.percent} % of its GPU-hour budget "
            f"({state.numbers()}): {what}.",
        )
        report.sent += 1


def check_budget_alerts(now: datetime | None = None) -> AlertReport:
    """Tell the team admins of every budget at or past 80 % / 100 % in its period, once per period and
    threshold. One budget per transaction; a budget that fails is logged and counted, the others run."""
    now = now or timezone.now()
    report = AlertReport()
    budgets = GpuHourBudget.objects.select_related("quota__group", "quota__tenant").order_by("id")
    report.failures = run_each(
        budgets,
        lambda b: _alert_one(b, now, report),
        task="budget-alerts",
        kind="budget",
    )
    return report
