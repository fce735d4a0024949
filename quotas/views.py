"""Quota pages. Thin: parse a form, call one service, render. Operators edit; members read their own.

- /quotas/                         operators: every group; everyone: their own quotas with headroom
- /quotas/groups/<id>/             operators: the quota tree of a group (bars, allocation, recent changes)
- /quotas/<id>/                    a quota (scoped): numbers, headroom, history
- /quotas/<id>/edit/               operators: edit form with inline errors and a what-if preview
- /quotas/<id>/what-if/            JSON for the page script (POST form fields)
- /quotas/reclaim-notices/         the reclaim-notices board (operators: every group; members: theirs)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from portal.api.errors import error_body
from portal.confirmation import Confirmation, confirm_then_act
from portal.errors import DomainError, InvalidInput, PreconditionFailed
from portal.forms import show_domain_error, stale_edit_message
from portal.numbers import counted, parse_int
from portal.scoping import (
    admin_tenant_ids_for,
    get_scoped_or_404,
    is_operator,
    require_operator,
    scope_queryset,
)
from quotas import budgets, loans, services
from quotas.delete_preview import group_delete_impact, quota_delete_impact
from quotas.fairness_forms import (
    BudgetForm,
    LoanDecisionForm,
    LoanRequestForm,
    ReclaimSettingsForm,
    TopUpForm,
    UserCapForm,
)
from quotas.fairness_report import quota_fairness
from quotas.forms import (
    DIMENSION_LABELS,
    GroupDeleteForm,
    GroupForm,
    NewQuotaForm,
    NoticeBoardForm,
    QuotaDeleteForm,
    QuotaForm,
    SelectorRowsForm,
    resource_rows,
)
from quotas.loans import lender_name
from quotas.models import GpuHourBudget, LoanState, Quota, QuotaChange, QuotaGroup, QuotaLoan
from quotas.notice_board import BoardQuery, board_page, board_query, board_summary, query_params
from quotas.presentation import bar, headroom_sentence
from quotas.reclaim_notices import reclaim_plan, save_reclaim_settings
from quotas.resources import Side, human, human_amount, human_short
from quotas.selector_preview import inventory_labels, preview_selector
from quotas.usage import GroupSnapshot, QuotaUsage, group_snapshot
from quotas.user_caps import set_user_cap


def _leaf(snapshot: GroupSnapshot, usage: QuotaUsage) -> dict[str, Any]:
    sides = []
    for side in (Side.GPU, Side.CPU):
        side_usage = usage.side(side)
        capacity = snapshot.capacity.side(side)
        primary = "gpu_milli" if side is Side.GPU else "cpu_milli"
        sides.append(
            {
                "side": side,
                "bar": bar(side_usage, side, capacity.get(primary)),
                "usage": side_usage,
                "used": human(side_usage.used, side.dimensions),
                "runtime": human(side_usage.runtime, side.dimensions),
                "borrowed": human(side_usage.borrowed, side.dimensions),
                "over": human(side_usage.over_runtime, side.dimensions),
                "has_over": side_usage.over_runtime.only(side.dimensions).any_positive(),
            }
        )
    return {"usage": usage, "sides": sides, "headroom": headroom_sentence(usage)}


def _group_summary(snapshot: GroupSnapshot) -> list[dict[str, Any]]:
    rows = []
    for side in (Side.GPU, Side.CPU):
        capacity = snapshot.capacity.side(side)
        mins = snapshot.sum_of_mins(side)
        used = snapshot.used(side)
        rows.append(
            {
                "side": side,
                "capacity": human(capacity, side.dimensions),
                "mins": human(mins, side.dimensions),
                "used": human(used, side.dimensions),
                "free": human(snapshot.free(side), side.dimensions),
                "overcommitted": not mins.fits_in(capacity),
            }
        )
    return rows


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """Operators: every group with its capacity and allocation. Everyone: their own quotas."""
    own = scope_queryset(Quota.objects.select_related("group", "tenant"), request.user)
    if is_operator(request.user):
        own = own.none()
    snapshots: dict[int, GroupSnapshot] = {}
    leaves = []
    for quota in own.order_by("group__name", "name"):
        if quota.group_id not in snapshots:
            snapshots[quota.group_id] = group_snapshot(quota.group)
        snapshot = snapshots[quota.group_id]
        leaves.append({"quota": quota, **_leaf(snapshot, snapshot.quota(quota.pk))})
    groups = []
    if is_operator(request.user):
        for group in QuotaGroup.objects.order_by("name"):
            snapshot = group_snapshot(group)
            groups.append(
                {
                    "group": group,
                    "summary": _group_summary(snapshot),
                    "count": len(snapshot.quotas),
                    "overlaps": snapshot.capacity.overlaps,
                }
            )
    return render(request, "quotas/index.html", {"leaves": leaves, "groups": groups})


@login_required
def group_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The quota tree of one group: capacity, allocation, per leaf bars, recent changes (operators)."""
    require_operator(request.user)
    group = get_object_or_404(QuotaGroup, pk=pk)
    snapshot = group_snapshot(group)
    leaves = [_leaf(snapshot, usage) for usage in snapshot.ordered()]
    changes = QuotaChange.objects.filter(group=group).select_related("actor")[:15]
    return render(
        request,
        "quotas/group_detail.html",
        {
            "group": group,
            "snapshot": snapshot,
            "summary": _group_summary(snapshot),
            "leaves": leaves,
            "changes": changes,
        },
    )


@login_required
def group_form(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    """Create or edit a group (operators)."""
    require_operator(request.user)
    group = get_object_or_404(QuotaGroup, pk=pk) if pk else None
    form = GroupForm(request.POST or None, group=group)
    previewing = request.method == "POST" and "preview" in request.POST
    preview = None
    if previewing and form.is_valid():
        # The no-JavaScript preview: the same answer as the live one, nothing saved.
        preview = preview_selector(form.selector(), group.pk if group else None)
    elif request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            if group is None:
                saved = services.create_group(
                    name=data["name"],
                    description=data["description"],
                    node_selector=data["node_selector"],
                    allow_overcommitted_min=data["allow_overcommitted_min"],
                    fair_share_half_life_hours=data["fair_share_half_life_hours"],
                    min_runtime_seconds=data["min_runtime_seconds"] or 0,
                    reclaim_notice_seconds=data["reclaim_notice_seconds"] or 0,
                    sharing_mode=data["sharing_mode"],
                    mig_profiles=data["mig_profiles"],
                    timeslice_replicas=data["timeslice_replicas"],
                    actor=request.user,
                    note=data["note"],
                )
            else:
                saved = services.update_group(
                    group,
                    expected_version=data.get("version") or group.version,
                    actor=request.user,
                    note=data["note"],
                    description=data["description"],
                    node_selector=data["node_selector"],
                    allow_overcommitted_min=data["allow_overcommitted_min"],
                    fair_share_half_life_hours=data["fair_share_half_life_hours"],
                    min_runtime_seconds=data["min_runtime_seconds"] or 0,
                    reclaim_notice_seconds=data["reclaim_notice_seconds"] or 0,
                    sharing_mode=data["sharing_mode"],
                    mig_profiles=data["mig_profiles"],
                    timeslice_replicas=data["timeslice_replicas"],
                )
        except PreconditionFailed:
            form.add_error(None, stale_edit_message("group", group))
        except DomainError as error:
            show_domain_error(form, error)
        else:
            messages.success(request, f"Group {saved.obj.name} saved.")
            for warning in saved.warnings:
                messages.warning(request, warning)
            return redirect("quotas:group", pk=saved.obj.pk)
    context = {"form": form, "group": group, "labels": inventory_labels(), "preview": preview}
    return render(request, "quotas/group_form.html", context)


@login_required
@require_GET
def selector_preview(request: HttpRequest) -> JsonResponse:
    """The builder's live preview (operators): the nodes and GPUs (per model) the rows' selector
    matches now and the groups it would overlap; `?group=<pk>` is the group being edited."""
    require_operator(request.user)
    form = SelectorRowsForm(request.GET)
    group_pk = (
        parse_int(request.GET.get("group", ""), minimum=1) if request.GET.get("group") else None
    )
    if request.GET.get("group") and group_pk is None:
        message = "A group id (a number)."
        return JsonResponse({"error": message, "fields": {"group": [message]}}, status=400)
    if not form.is_valid():
        fields = {name: list(errors) for name, errors in form.errors.items()}
        return JsonResponse({"error": "Fix the selector rows.", "fields": fields}, status=400)
    return JsonResponse(preview_selector(form.selector(), group_pk).as_json())


def _what_if_rows(rows: list[Any]) -> list[dict[str, Any]]:
    result = []
    for row in rows:
        result.append(
            {
                "name": row.name,
                "is_target": row.is_target,
                "gpu_demand": human_amount("gpu_milli", row.gpu_demand.gpu_milli),
                "gpu_before": human_amount("gpu_milli", row.gpu_before.gpu_milli),
                "gpu_after": human_amount("gpu_milli", row.gpu_after.gpu_milli),
                "gpu_changed": row.gpu_before.gpu_milli != row.gpu_after.gpu_milli,
                "cpu_demand": human_amount("cpu_milli", row.cpu_demand.cpu_milli),
                "cpu_before": human_amount("cpu_milli", row.cpu_before.cpu_milli),
                "cpu_after": human_amount("cpu_milli", row.cpu_after.cpu_milli),
                "cpu_changed": row.cpu_before.cpu_milli != row.cpu_after.cpu_milli,
                "changed": row.changed,
            }
        )
    return result


def _quota_form_page(
    request: HttpRequest, *, group: QuotaGroup, quota: Quota | None
) -> HttpResponse:
    form_class = NewQuotaForm if quota is None else QuotaForm
    form = form_class(request.POST or None, quota=quota)
    preview: list[dict[str, Any]] | None = None
    if request.method == "POST" and form.is_valid():
        values = form.values()
        data = form.cleaned_data
        try:
            if "preview" in request.POST:
                rows = services.what_if(
                    group,
                    quota,
                    values,
                    tenant=data.get("tenant"),
                    name=data.get("name") or None,
                )
                preview = _what_if_rows(rows)
            elif quota is None:
                saved = services.create_quota(
                    group=group,
                    tenant=data["tenant"],
                    name=data.get("name") or None,
                    actor=request.user,
                    note=data["note"],
                    **values,
                )
            else:
                saved = services.update_quota(
                    quota,
                    expected_version=data.get("version") or quota.version,
                    actor=request.user,
                    note=data["note"],
                    **values,
                )
        except PreconditionFailed:
            assert quota is not None
            form.add_error(None, stale_edit_message("quota", quota))
        except DomainError as error:
            show_domain_error(form, error)
        else:
            if preview is None:
                messages.success(request, f"Quota {saved.obj} saved (version {saved.obj.version}).")
                for warning in saved.warnings:
                    messages.warning(request, warning)
                return redirect("quotas:group", pk=group.pk)
    what_if_url = (
        reverse("quotas:quota-what-if", args=[quota.pk])
        if quota
        else reverse("quotas:group-what-if", args=[group.pk])
    )
    bound_rows = [
        {"side": side, "label": label, "min": form[min_name], "max": form[max_name]}
        for side, label, min_name, max_name in resource_rows()
    ]
    history = QuotaChange.objects.filter(quota=quota).select_related("actor")[:20] if quota else []
    return render(
        request,
        "quotas/quota_form.html",
        {
            "form": form,
            "group": group,
            "quota": quota,
            "rows": bound_rows,
            "preview": preview,
            "what_if_url": what_if_url,
            "history": history,
        },
    )


@login_required
def quota_create(request: HttpRequest, group_pk: int) -> HttpResponse:
    require_operator(request.user)
    group = get_object_or_404(QuotaGroup, pk=group_pk)
    return _quota_form_page(request, group=group, quota=None)


@login_required
def quota_edit(request: HttpRequest, pk: int) -> HttpResponse:
    quota = get_scoped_or_404(Quota.objects.select_related("group", "tenant"), request.user, pk=pk)
    if not is_operator(request.user):
        raise PermissionDenied("Only platform operators change quotas.")
    return _quota_form_page(request, group=quota.group, quota=quota)


def _what_if_json(request: HttpRequest, group: QuotaGroup, quota: Quota | None) -> JsonResponse:
    form_class = NewQuotaForm if quota is None else QuotaForm
    form = form_class(request.POST, quota=quota)
    if not form.is_valid():
        fields = {name: [str(e) for e in errors] for name, errors in form.errors.items()}
        return JsonResponse(
            error_body("invalid", "Fix the highlighted fields.", fields), status=400
        )
    data = form.cleaned_data
    try:
        rows = services.what_if(
            group, quota, form.values(), tenant=data.get("tenant"), name=data.get("name") or None
        )
    except InvalidInput as error:
        return JsonResponse(error_body(error.code, error.message, error.fields), status=400)
    return JsonResponse({"rows": _what_if_rows(rows)})


@login_required
@require_POST
def quota_what_if(request: HttpRequest, pk: int) -> JsonResponse:
    """JSON preview for the edit page: every sibling's runtime share before/after (nothing saved)."""
    require_operator(request.user)
    quota = get_object_or_404(Quota.objects.select_related("group", "tenant"), pk=pk)
    return _what_if_json(request, quota.group, quota)


@login_required
@require_POST
def group_what_if(request: HttpRequest, pk: int) -> JsonResponse:
    """JSON preview for the new-quota page."""
    require_operator(request.user)
    group = get_object_or_404(QuotaGroup, pk=pk)
    return _what_if_json(request, group, None)


@login_required
def quota_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A quota (members of its tenant and operators): bounds, use, runtime share, headroom, history."""
    quota = get_scoped_or_404(Quota.objects.select_related("group", "tenant"), request.user, pk=pk)
    return _quota_page(request, quota)


def _fairness_context(
    request: HttpRequest, quota: Quota, bound: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The "Fairness over time" card: the report and its forms (the bound one, with its errors)."""
    user = request.user
    operator = is_operator(user)
    admin_of = admin_tenant_ids_for(user)
    report = quota_fairness(quota)
    loans = [
        {
            "loan": loan,
            "active": report.loan_active(loan),
            "direction": "lent to" if loan.lender_id == quota.pk else "borrowed from",
            "other_name": loan.borrower.name if loan.lender_id == quota.pk else lender_name(loan),
            "can_decide": loan.state == LoanState.REQUESTED
            and (operator or (loan.lender is not None and loan.lender.tenant_id in admin_of)),
            "can_cancel": loan.state == LoanState.REQUESTED
            and (operator or loan.borrower.tenant_id in admin_of),
        }
        for loan in report.loans
    ]
    forms_: dict[str, Any] = {
        "loan_form": LoanRequestForm(borrower=quota),
        "budget_form": BudgetForm(),
        "top_up_form": TopUpForm(),
        "user_cap_form": UserCapForm(initial={"max_gpus_per_user": quota.max_gpus_per_user}),
        "reclaim_form": ReclaimSettingsForm(
            initial={
                "reclaim_notice_seconds": quota.group.reclaim_notice_seconds,
                "checkpoint_webhook_url": quota.checkpoint_webhook_url,
                "equal_borrowing_share": quota.equal_borrowing_share,
            }
        ),
    }
    forms_.update(bound or {})
    return {
        "fairness": report,
        "fair_sentence": report.fair_share.sentence() if report.fair_share else "",
        "budget_rows": [{"view": v, "sentence": v.sentence()} for v in report.budgets],
        "loan_rows": loans,
        "can_request_loan": operator or quota.tenant_id in admin_of,
        "reclaim_plan": reclaim_plan(quota),
        **forms_,
    }


def _quota_page(
    request: HttpRequest, quota: Quota, bound: dict[str, Any] | None = None, status: int = 200
) -> HttpResponse:
    snapshot = group_snapshot(quota.group)
    leaf = _leaf(snapshot, snapshot.quota(quota.pk))
    table = []
    for side in (Side.GPU, Side.CPU):
        usage = snapshot.quota(quota.pk).side(side)
        for dimension in side.dimensions:
            table.append(
                {
                    "side": side,
                    "dimension": DIMENSION_LABELS[dimension],
                    **{
                        key: human_short(dimension, getattr(usage, key).get(dimension))
                        for key in (
                            "min",
                            "max",
                            "used",
                            "pending",
                            "runtime",
                            "borrowed",
                            "headroom",
                            "guaranteed_headroom",
                        )
                    },
                }
            )
    history = QuotaChange.objects.filter(quota=quota).select_related("actor")[:50]
    return render(
        request,
        "quotas/quota_detail.html",
        {
            "quota": quota,
            "leaf": leaf,
            "table": table,
            "history": history,
            "can_edit": is_operator(request.user),
            **_fairness_context(request, quota, bound),
        },
        status=status,
    )


@login_required
@require_POST
def quota_fairness_action(request: HttpRequest, pk: int) -> HttpResponse:
    """POST from the "Fairness over time" card: `action` = request_loan, decide_loan, add_budget or
    top_up. A refusal comes back as the page with the form's errors (400)."""
    quota = get_scoped_or_404(Quota.objects.select_related("group", "tenant"), request.user, pk=pk)
    kind = request.POST.get("action", "")
    form: forms.Form
    if kind == "request_loan":
        form, key = LoanRequestForm(request.POST, borrower=quota), "loan_form"
    elif kind == "decide_loan":
        form, key = LoanDecisionForm(request.POST), "decision_form"
    elif kind == "add_budget":
        form, key = BudgetForm(request.POST), "budget_form"
    elif kind == "top_up":
        form, key = TopUpForm(request.POST), "top_up_form"
    elif kind == "user_cap":
        form, key = UserCapForm(request.POST), "user_cap_form"
    elif kind == "reclaim_settings":
        form, key = ReclaimSettingsForm(request.POST), "reclaim_form"
    else:
        messages.error(request, "Unknown action.")
        return redirect("quotas:quota", pk=pk)
    if form.is_valid():
        try:
            done = _apply_fairness_action(request, quota, kind, form.cleaned_data)
        except DomainError as error:
            show_domain_error(form, error)
            messages.error(request, error.message)  # seen even where the form is not shown
        else:
            messages.success(request, done)
            return redirect("quotas:quota", pk=pk)
    if key == "decision_form":
        messages.error(request, "; ".join(str(e) for errs in form.errors.values() for e in errs))
    return _quota_page(request, quota, {key: form}, status=400)


def _apply_fairness_action(
    request: HttpRequest, quota: Quota, kind: str, data: dict[str, Any]
) -> str:
    if kind == "request_loan":
        loan = loans.request_loan(
            borrower=quota,
            lender=data["lender"],
            gpus=data["gpus"],
            starts_at=data["starts_at"],
            ends_at=data["ends_at"],
            reason=data["reason"],
            actor=request.user,
        )
        return f"Asked {lender_name(loan)} for {counted(loan.gpus, 'GPU')} of min."
    if kind == "decide_loan":
        loan_row = get_object_or_404(
            QuotaLoan.objects.filter(Q(lender=quota) | Q(borrower=quota)), pk=data["loan"]
        )
        if data["decision"] == "cancel":
            saved = loans.cancel_loan(
                loan_row, actor=request.user, expected_version=data["version"]
            )
        else:
            saved = loans.decide_loan(
                loan_row,
                approve=data["decision"] == "approve",
                actor=request.user,
                expected_version=data["version"],
                note=data["note"],
            )
        return f"Loan {saved.pk} is {saved.state}."
    if kind == "add_budget":
        budgets.create_budget(quota, data, actor=request.user)
        return "Budget added."
    if kind == "reclaim_settings":
        save_reclaim_settings(quota, **data, actor=request.user)
        return "Polite reclaim settings saved."
    if kind == "user_cap":
        cap = set_user_cap(quota, data["max_gpus_per_user"], actor=request.user).max_gpus_per_user
        return f"Per-person cap: {counted(cap, 'GPU')}." if cap else "Per-person cap removed."
    budget = get_object_or_404(GpuHourBudget, pk=data["budget"], quota=quota)
    budgets.top_up_budget(budget, data["gpu_hours"], actor=request.user, reason=data["reason"])
    return f"Added {data['gpu_hours']} GPU-hours to the budget."


@login_required
@require_http_methods(["GET", "POST"])
def quota_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the one confirmation (what the delete does). POST: delete, audited, then redirect; a bad
    note shows on the confirmation (400), nothing deleted."""
    require_operator(request.user)
    quota = get_object_or_404(Quota.objects.select_related("group", "tenant"), pk=pk)
    form = QuotaDeleteForm(
        request.POST if request.method == "POST" else None, initial={"version": quota.version}
    )

    def delete(cleaned: Mapping[str, Any]) -> str:
        services.delete_quota(
            quota,
            expected_version=cleaned.get("version") or quota.version,
            actor=request.user,
            note=cleaned.get("note", ""),
        )
        return f"Quota {quota.name} deleted."

    quota_url = reverse("quotas:quota", kwargs={"pk": quota.pk})
    return confirm_then_act(
        request,
        form,
        Confirmation(
            title=f"Delete quota {quota.name}?",
            impact=lambda: quota_delete_impact(quota),
            button="Delete quota",
            cancel_url=quota_url,
        ),
        delete,
        done_url=reverse("quotas:group", kwargs={"pk": quota.group_id}),
        refused_url=quota_url,
    )


@login_required
@require_http_methods(["GET", "POST"])
def group_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the one confirmation (what the delete does: refused while the group has quotas, otherwise
    the nodes and GPUs it stops scheduling). POST: delete, audited, then redirect."""
    require_operator(request.user)
    group = get_object_or_404(QuotaGroup, pk=pk)
    form = GroupDeleteForm(
        request.POST if request.method == "POST" else None, initial={"version": group.version}
    )

    def delete(cleaned: Mapping[str, Any]) -> str:
        services.delete_group(
            group,
            expected_version=cleaned.get("version") or group.version,
            actor=request.user,
            reason=cleaned.get("reason", ""),
        )
        return f"Group {group.name} deleted."

    group_url = reverse("quotas:group", kwargs={"pk": group.pk})
    return confirm_then_act(
        request,
        form,
        Confirmation(
            title=f"Delete group {group.name}?",
            impact=lambda: group_delete_impact(group),
            button="Delete group",
            cancel_url=group_url,
        ),
        delete,
        done_url=reverse("quotas:index"),
        refused_url=group_url,
    )


@login_required
@require_GET
def reclaim_notices(request: HttpRequest) -> HttpResponse:
    """The reclaim-notices board: the reclaim plan (what, whose, when) across groups, with its live
    totals per group. Bad filters come back as the form's errors (400) and no rows."""
    form = NoticeBoardForm(request.GET or None)
    query: BoardQuery | None = BoardQuery()
    if request.GET:
        query = None
        if form.is_valid():
            try:
                query = board_query(
                    request.user,
                    **{name: form.cleaned_data.get(name) or "" for name in form.fields},
                    cursor=request.GET.get("cursor", ""),
                )
            except InvalidInput as error:
                show_domain_error(form, error)
    context: dict[str, Any] = {
        "form": form,
        "rows": [],
        "summary": None,
        "next_query": "",
        "previous_query": "",
    }
    if query is not None:
        page = board_page(request.user, query)
        summary = board_summary(request.user, query)
        context["rows"] = page.rows
        shown = summary.as_json()
        shown["gpus_text"] = human_amount("gpu_milli", summary.gpu_milli)
        for row, group in zip(shown["groups"], summary.groups, strict=True):
            row["gpus_text"] = human_amount("gpu_milli", group.gpu_milli)
        context["summary"] = shown
        for key, position in (
            ("next_query", page.next_position),
            ("previous_query", page.previous_position),
        ):
            if position is not None:
                context[key] = urlencode({**query_params(query), "cursor": position.encode()})
    return render(
        request, "quotas/reclaim_notices.html", context, status=200 if query is not None else 400
    )
