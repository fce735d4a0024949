"""Codespaces pages. Thin: pick the rows through tenant scoping, call one service, render or redirect."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from codespaces import pools, services
from codespaces.access import can_manage, codespace_for
from codespaces.choices import CodespaceState
from codespaces.delete_preview import codespace_delete_impact, deletes_for_someone_else
from codespaces.forms import CUSTOM, SERVICE_FIELD_TO_FORM, CodespaceCreateForm, SizePreviewForm
from codespaces.models import Codespace, CodespaceTemplate, attach_placements
from codespaces.services import waste
from codespaces.services.suspend import live_notice
from codespaces.utilization import codespace_gpu_use, utilization_series
from portal.api.parsers import load_json_object
from portal.errors import DomainError
from portal.forms import show_domain_error
from portal.models import Tenant
from portal.numbers import parse_int
from portal.scoping import admin_tenant_ids_for, current_user, is_operator, require_operator
from scheduling.forms import ReasonForm
from scheduling.services.start_estimates import estimate_for
from scheduling.telemetry.services import gpu_use_by_tenant


def _nav(user: Any, scope: str) -> dict[str, Any]:
    """What the codespaces sub-navigation shows: the team tab only for tenant admins and operators."""
    return {"scope": scope, "can_see_team": is_operator(user) or bool(admin_tenant_ids_for(user))}


def _active_tenant(request: HttpRequest) -> Any:
    tenant = getattr(request, "active_tenant", None)
    if tenant is None:
        raise Http404("You are not a member of any team.")
    return tenant


@login_required
def my_codespaces(request: HttpRequest) -> HttpResponse:
    user = current_user(request)
    rows = attach_placements(list(services.visible_codespaces(user, scope="mine")))
    return render(
        request,
        "codespaces/list.html",
        {"codespaces": rows, "title": "My codespaces", "show_owner": False, **_nav(user, "mine")},
    )


@login_required
def team_codespaces(request: HttpRequest) -> HttpResponse:
    user = current_user(request)
    if not (is_operator(user) or admin_tenant_ids_for(user)):
        raise PermissionDenied("Only tenant admins see their team's codespaces.")
    rows = attach_placements(list(services.visible_codespaces(user, scope="team")))
    return render(
        request,
        "codespaces/list.html",
        {"codespaces": rows, "title": "Team codespaces", "show_owner": True, **_nav(user, "team")},
    )


@login_required
def all_codespaces(request: HttpRequest) -> HttpResponse:
    user = current_user(request)
    require_operator(user)
    rows = attach_placements(list(services.visible_codespaces(user, scope="all")))
    return render(
        request,
        "codespaces/list.html",
        {"codespaces": rows, "title": "All codespaces", "show_owner": True, **_nav(user, "all")},
    )


@login_required
def savings(request: HttpRequest) -> HttpResponse:
    require_operator(request.user)
    return render(
        request,
        "codespaces/savings.html",
        {"savings": services.savings(), **_nav(request.user, "savings")},
    )


def _picker_context(template: CodespaceTemplate | None, quota: Any, owner: Any) -> dict[str, Any]:
    if template is None or quota is None:
        return {"picker": None}
    return {"picker": services.picker_data(template, quota, owner)}


@login_required
def create(request: HttpRequest) -> HttpResponse:
    """The create page with the slice picker (what fits now, what would queue and why)."""
    user = current_user(request)
    tenant = _active_tenant(request)
    templates = list(services.templates_for_tenant(tenant).prefetch_related("presets"))
    quotas = list(services.quotas_for_tenant(tenant))
    source = request.POST if request.method == "POST" else request.GET
    selected = next((t for t in templates if t.name == source.get("template")), None)
    selected = selected or (templates[0] if templates else None)
    quota = next((q for q in quotas if str(q.pk) == source.get("quota")), None)
    quota = quota or services.default_quota(selected, quotas)
    gpu_models = [m.model for m in pools.gpu_models_of_group(quota.group)] if quota else []
    initial = {
        "template": selected.name if selected else "",
        "quota": str(quota.pk) if quota else "",
        "preset": source.get("preset") or "",
    }
    form = CodespaceCreateForm(
        request.POST if request.method == "POST" else None,
        initial=initial,
        templates=templates,
        quotas=quotas,
        selected_template=selected,
        gpu_models=gpu_models,
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            codespace = services.create_codespace(
                user=user,
                tenant=tenant,
                template=data["template"],
                name=data["name"],
                preset=None if data["preset"] == CUSTOM else data["preset"],
                size=form.size() if data["preset"] == CUSTOM else None,
                quota=int(data["quota"]),
            )
        except DomainError as exc:
            show_domain_error(form, exc, SERVICE_FIELD_TO_FORM)
        else:
            messages.success(request, f"Codespace “{codespace.name}” created.")
            return redirect("codespaces:detail", pk=codespace.pk)
    context = {
        "form": form,
        "templates": templates,
        "selected_template": selected,
        "quota": quota,
        **_picker_context(selected, quota, user),
    }
    return render(request, "codespaces/create.html", context)


@login_required
@require_POST
def preview_json(request: HttpRequest) -> JsonResponse:
    """The picker's "check this custom size" call: validation errors or the scheduler's preview."""
    tenant = _active_tenant(request)
    try:
        form = SizePreviewForm(load_json_object(request.body))
        if not form.is_valid():
            fields = {name: list(errors) for name, errors in form.errors.items()}
            message = "; ".join(f"{name}: {errors[0]}" for name, errors in fields.items())
            return JsonResponse({"valid": False, "message": message, "fields": fields}, status=400)
        data = form.cleaned_data
        answer = services.preview_size(
            tenant,
            template=data["template"],
            quota=data["quota"],
            size=form.size(),
            owner=current_user(request),
        )
    except DomainError as exc:
        fields = {SERVICE_FIELD_TO_FORM.get(k, k) or k: v for k, v in exc.fields.items()}
        return JsonResponse({"valid": False, "message": exc.message, "fields": fields}, status=400)
    result = answer.result
    return JsonResponse(
        {
            "valid": True,
            "starts_now": result.starts_now,
            "code": result.code,
            "reason": result.reason,
            "node": result.node,
        }
    )


@login_required
def detail(request: HttpRequest, pk: int) -> HttpResponse:
    user = current_user(request)
    codespace = codespace_for(user, pk)
    events = list(codespace.events.select_related("actor")[:100])
    return render(
        request,
        "codespaces/detail.html",
        {
            "codespace": codespace,
            "events": events,
            "can_manage": can_manage(user, codespace),
            "S": CodespaceState,
            "gpu_use": codespace_gpu_use(codespace),
            "start_estimate": estimate_for(codespace.workload) if codespace.workload else None,
            "reclaim_notice": live_notice(codespace),
        },
    )


def _action(request: HttpRequest, pk: int, verb: str) -> HttpResponse:
    user = current_user(request)
    codespace = codespace_for(user, pk)
    if not can_manage(user, codespace):
        raise PermissionDenied("Only the owner, a tenant admin or an operator may do that.")
    actions: dict[str, Callable[..., Codespace]] = {
        "start": services.start_codespace,
        "stop": services.stop_codespace,
        "keep": services.keep_codespace,
    }
    action = actions[verb]
    try:
        action(codespace, actor=user)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        done = {
            "start": "queued to start",
            "stop": "stopped; its home volume is kept",
            "keep": "kept running",
        }[verb]
        messages.success(request, f"Codespace “{codespace.name}” {done}.")
    return redirect("codespaces:detail", pk=codespace.pk)


@login_required
@require_POST
def start(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(request, pk, "start")


@login_required
@require_POST
def stop(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(request, pk, "stop")


@login_required
@require_http_methods(["GET", "POST"])
def delete(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the one confirmation (what is lost). POST: delete, then redirect. Deleting another user's
    codespace asks for a reason (the owner reads it in the timeline; the activity log keeps it): a
    missing one shows on the confirmation (400), nothing deleted."""
    user = current_user(request)
    codespace = codespace_for(user, pk)
    if not can_manage(user, codespace):
        raise PermissionDenied("Only the owner, a tenant admin or an operator may do that.")
    for_someone_else = deletes_for_someone_else(user, codespace)
    form = (
        ReasonForm(
            request.POST if request.method == "POST" else None,
            reason_required=True,
        )
        if for_someone_else
        else None
    )
    if request.method == "POST" and (form is None or form.is_valid()):
        reason = form.cleaned_data["reason"] if form is not None else ""
        try:
            services.delete_codespace(codespace, actor=user, reason=reason)
        except DomainError as exc:
            messages.error(request, exc.message)
            return redirect("codespaces:detail", pk=codespace.pk)
        messages.success(request, f"Codespace “{codespace.name}” deleted.")
        return redirect("codespaces:list")
    context = {
        "title": f"Delete codespace {codespace.name}?",
        "impact": codespace_delete_impact(codespace),
        "form": form,
        "button": "Delete codespace",
        "danger": True,
        "cancel_url": reverse("codespaces:detail", kwargs={"pk": codespace.pk}),
    }
    return render(
        request, "portal/confirm.html", context, status=400 if request.method == "POST" else 200
    )


@login_required
@require_POST
def keep(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(request, pk, "keep")


@login_required
@require_POST
def move_consent(request: HttpRequest, pk: int) -> HttpResponse:
    """The owner allows (consent=yes) or stops allowing defragmentation to move it while in use."""
    user = current_user(request)
    codespace = codespace_for(user, pk)
    if not can_manage(user, codespace):
        raise PermissionDenied("Only the owner, a tenant admin or an operator may do that.")
    consent = request.POST.get("consent", "")
    if consent not in ("yes", "no"):
        messages.error(request, "consent: choose yes or no.")
        return redirect("codespaces:detail", pk=codespace.pk)
    services.set_move_consent(codespace, actor=user, consent=consent == "yes")
    messages.success(
        request,
        f"Codespace “{codespace.name}”: defragmentation may move it "
        + ("while in use." if consent == "yes" else "only when idle."),
    )
    return redirect("codespaces:detail", pk=codespace.pk)


@login_required
@require_GET
def status_json(request: HttpRequest) -> JsonResponse:
    """Polled by the list and detail pages: state, location and a 60-minute utilization series for the
    codespaces named in `?ids=1,2,3` (only those the user may see)."""
    user = current_user(request)
    parsed = [parse_int(i, minimum=1) for i in request.GET.get("ids", "").split(",") if i.strip()]
    if None in parsed:
        return JsonResponse(
            {
                "error": "ids must be numbers (comma-separated codespace ids)",
                "fields": {"ids": ["Comma-separated codespace ids, each a number."]},
            },
            status=400,
        )
    ids = [i for i in parsed if i is not None][:100]
    rows = attach_placements(list(services.scoped_codespaces(user).filter(pk__in=ids)))
    since = timezone.now() - timedelta(minutes=60)
    series = utilization_series([c.workload_id for c in rows if c.workload_id], since)
    return JsonResponse(
        {
            "codespaces": [
                {
                    "id": c.pk,
                    "state": c.phase,
                    "state_label": c.phase_label,
                    "badge": c.badge,
                    "location": c.location,
                    "gpu_model": c.gpu_model_placed,
                    "pending_reason": c.waiting_reason,
                    "queue_position": c.waiting_position,
                    "idle_warned": c.idle_warned_at is not None,
                    "detail_url": reverse("codespaces:detail", args=[c.pk]),
                    "utilization": series.get(c.workload_id, {"ts": [], "values": []})
                    if c.workload_id
                    else {"ts": [], "values": []},
                }
                for c in rows
            ]
        }
    )


def _waste_for(request: HttpRequest) -> waste.WasteReport:
    """The waste report of ?team=slug (default: the user's first team they administer); team admins
    see their teams, operators any; ?idle_percent= and ?window_days= override the settings."""
    user = current_user(request)
    allowed = (
        Tenant.objects.all()
        if is_operator(user)
        else Tenant.objects.filter(pk__in=admin_tenant_ids_for(user))
    )
    slug = request.GET.get("team", "")[:63]
    tenant = (allowed.filter(slug=slug) if slug else allowed.order_by("slug")).first()
    if tenant is None:
        raise PermissionDenied("Waste reports are for the team's admins and operators.")
    default = waste.waste_policy()
    policy = waste.WastePolicy(
        idle_percent=parse_number(request.GET, "idle_percent", default.idle_percent),
        window_days=_window_days(request.GET.get("window_days"), default.window_days),
    )
    return waste.waste_report(tenant, timezone.now(), policy)


def _window_days(raw: str | None, default: int) -> int:
    if raw in (None, ""):
        return default
    days = parse_int(raw, minimum=1, maximum=waste.MAX_WINDOW_DAYS)
    if days is None:
        message = f"whole days between 1 and {waste.MAX_WINDOW_DAYS}"
        raise DomainError(f"window_days: {message}.", fields={"window_days": [message]})
    return days


def parse_number(query: Any, name: str, default: float) -> float:
    raw = query.get(name)
    if raw in (None, ""):
        return default
    try:
        return float(str(raw)[:20])
    except ValueError as exc:
        raise DomainError(f"{name}: a number.", fields={name: ["a number"]}) from exc


@login_required
def waste_page(request: HttpRequest) -> HttpResponse:
    """A team's weekly waste report (team admins, operators): idle GPU-hours by person and
    template, never-used codespaces, jobs with idle GPUs, top savings."""
    try:
        report = _waste_for(request)
    except DomainError as exc:
        return render(
            request,
            "codespaces/waste.html",
            {"error": exc, **_nav(request.user, "waste")},
            status=400,
        )
    since = timezone.now() - timedelta(hours=24)
    team_use = gpu_use_by_tenant([report.tenant.pk], since).get(report.tenant.pk)
    context = {"report": report, "team_use": team_use, **_nav(request.user, "waste")}
    return render(request, "codespaces/waste.html", context)


@login_required
def waste_csv(request: HttpRequest) -> HttpResponse:
    try:
        report = _waste_for(request)
    except DomainError as exc:
        return JsonResponse({"error": {"message": exc.message, "fields": exc.fields}}, status=400)
    response = HttpResponse(waste.waste_csv(report), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="gpu-waste-{report.tenant.slug}.csv"'
    return response
