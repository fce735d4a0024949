"""The Defragment panel of the fragmentation page (operators): preview a plan of the pool, read its moves,
cost and value, apply it (`scheduling.services.defrag`). POSTs redirect back to the page with the plan."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from portal.confirmation import Confirmation, confirm_then_act
from portal.errors import DomainError
from portal.numbers import counted
from portal.operator_log import ActionImpact
from portal.scoping import is_operator
from quotas.models import QuotaGroup
from scheduling.choices import DefragPlanState
from scheduling.models import DefragPlan
from scheduling.services.defrag import apply_defrag, preview_defrag


def duration_text(seconds: float) -> str:
    """A duration as people read it: 45 s, 12 min, 3.5 h, 2.0 days."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


class PreviewForm(forms.Form):
    pool = forms.ModelChoiceField(
        queryset=QuotaGroup.objects.all(),
        to_field_name="name",
        error_messages={
            "invalid_choice": "No such pool.",
        },
    )


def _require_operator(request: HttpRequest) -> None:
    if not is_operator(request.user):
        raise PermissionDenied("Only platform operators can defragment a pool.")


def _back(pool: QuotaGroup, plan: DefragPlan | None = None) -> str:
    query: dict[str, Any] = {"pool": pool.name}
    if plan is not None:
        query["plan"] = plan.pk
    return f"{reverse('dashboards:fragmentation')}?{urlencode(query)}#defrag"


def panel_context(request: HttpRequest, pool: QuotaGroup | None) -> dict[str, Any] | None:
    """What the panel shows an operator (None for everyone else): the plan named by `?plan=` when it
    is one of this pool's."""
    if pool is None or not is_operator(request.user):
        return None
    raw = request.GET.get("plan", "")
    plan = None
    if raw.isdigit() and len(raw) <= 18:
        plan = (
            DefragPlan.objects.filter(pk=int(raw), group=pool)
            .prefetch_related("moves__workload", "moves__tenant")
            .first()
        )
    moves = []
    if plan is not None:
        moves = [
            {
                "workload": m.workload.name,
                "kind": "codespace" if m.workload.kind == "codespace" else "job",
                "team": m.tenant.slug,
                "from": f"{m.from_node} GPU {', '.join(str(g) for g in m.from_gpus) or '-'}",
                "to": f"{m.to_node} GPU {', '.join(str(g) for g in m.to_gpus) or '-'}",
                "running": duration_text(m.running_seconds),
                "cost": duration_text(m.cost_seconds),
                "reason": m.reason,
            }
            for m in plan.moves.all()
        ]
    return {
        "plan": plan,
        "moves": moves,
        "cost": duration_text(plan.cost_seconds) if plan is not None else "",
        "can_apply": plan is not None and plan.state == DefragPlanState.PREVIEWED and bool(moves),
    }


@require_POST
def defrag_preview(request: HttpRequest) -> HttpResponse:
    _require_operator(request)
    form = PreviewForm(request.POST)
    if not form.is_valid():
        problems = [str(e) for e in form.errors.get("pool", ["bad input"])]
        messages.error(request, f"Defragment: {'; '.join(problems)}")
        return redirect(reverse("dashboards:fragmentation"))
    pool = form.cleaned_data["pool"]
    try:
        plan = preview_defrag(pool.pk, actor=request.user)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(_back(pool))
    messages.success(request, f"Plan {plan.pk} previewed; nothing has moved yet.")
    return redirect(_back(pool, plan))


def apply_impact(plan: DefragPlan) -> ActionImpact:
    """What applying `plan` does, for its confirmation: how many workloads move (each restarts on its
    new GPU) and what that frees."""
    moves = plan.moves.count()
    return ActionImpact(
        summary=f"{counted(moves, 'workload')} {'moves' if moves == 1 else 'move'} (restarts): {plan.value}"
    )


@require_http_methods(["GET", "POST"])
def defrag_apply(request: HttpRequest, plan_id: int) -> HttpResponse:
    """GET: the confirmation (what moves, what it frees); POST: apply the plan (portal.confirmation)."""
    _require_operator(request)
    plan = DefragPlan.objects.select_related("group").filter(pk=plan_id).first()
    if plan is None:
        messages.error(request, f"Defragmentation plan {plan_id} does not exist.")
        return redirect(reverse("dashboards:fragmentation"))
    back = _back(plan.group, plan)

    def apply(_cleaned: Any) -> str:
        applied = apply_defrag(plan.pk, actor=request.user)
        if applied.state != DefragPlanState.APPLIED:
            raise DomainError(f"Plan {applied.pk} was not applied. {applied.error}")
        return f"Plan {applied.pk} applied: {applied.value}"

    return confirm_then_act(
        request,
        forms.Form(request.POST if request.method == "POST" else None),
        Confirmation(
            title=f"Apply defragmentation plan {plan.pk} of pool {plan.group.name}?",
            impact=lambda: apply_impact(plan),
            button=f"Apply plan {plan.pk}",
            cancel_url=back,
        ),
        apply,
        done_url=back,
        refused_url=back,
    )
