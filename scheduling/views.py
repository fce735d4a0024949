"""Cluster pages: nodes and GPUs (who holds each slice), per-node detail with operator actions, and gang
jobs (submit, follow, cancel). Thin: scope, call a service, render."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from portal.charts import what_if_figure
from portal.choices import OperatorActionKind as Kind
from portal.errors import DomainError, InvalidInput
from portal.operator_log import (
    REASON_REQUIRED,
    ActionImpact,
    actions_on_node,
    actions_on_workloads,
    operator_notice,
)
from portal.scoping import (
    can_admin_tenant,
    current_user,
    get_scoped_or_404,
    is_operator,
    require_operator,
    scope_queryset,
    tenant_ids_for,
)
from quotas.models import Quota
from scheduling import services
from scheduling.choices import ACTIVE_STATES, GangState, GangTopologyMode
from scheduling.forms import JobForm, ReasonForm, WhatIfForm
from scheduling.models import Gang, Gpu, Node, Placement, Shard, Workload
from scheduling.services.audit import invariant_statuses, latest_run
from scheduling.services.cluster_view import cluster_totals, node_rows
from scheduling.services.mig_reconfig import reconfiguration_rows
from scheduling.services.operator_impact import (
    gpu_action_impact,
    job_cancel_impact,
    node_action_impact,
)
from scheduling.services.start_estimates import estimate_for, estimates_for
from scheduling.services.topology import cluster_topology
from scheduling.services.trace_upload import MAX_TRACE_BYTES, parse_trace
from scheduling.services.whatif import WhatIfChange, run_whatif
from scheduling.telemetry.health import node_health
from scheduling.telemetry.services import gpu_use_by_workload


def _require_operator(request: HttpRequest) -> None:
    if not is_operator(request.user):
        raise PermissionDenied("Only platform operators can change the cluster inventory.")


@login_required
def cluster(request: HttpRequest) -> HttpResponse:
    pools = sorted(set(Node.objects.values_list("pool", flat=True)))
    pool = request.GET.get("pool", "")
    nodes = Node.objects.order_by("name")
    if pool:
        nodes = nodes.filter(pool=pool)
    context = {
        "rows": node_rows(request.user, nodes),
        "totals": cluster_totals(pool or None),
        "pools": pools,
        "pool": pool,
        "shards": Shard.objects.select_related("group").order_by("group__name"),
        "simulated": settings.TESSERA_BACKEND == "simulated",
        "topology": cluster_topology(),
        "mig_reconfigurations": reconfiguration_rows(pool=pool),
    }
    return render(request, "scheduling/cluster.html", context)


@login_required
def node_detail(request: HttpRequest, node_id: int) -> HttpResponse:
    node = get_object_or_404(Node, pk=node_id)
    row = node_rows(request.user, [node])[0]
    user = request.user
    ops = is_operator(user)
    mine = tenant_ids_for(user)
    placements = [
        p
        for p in Placement.objects.filter(node=node, released_at__isnull=True)
        .select_related("workload", "tenant")
        .prefetch_related("gpu_shares__gpu")
        .order_by("created_at")
        if ops or p.tenant_id in mine
    ]
    hidden = Placement.objects.filter(node=node, released_at__isnull=True).count() - len(placements)
    context = {
        "row": row,
        "node": node,
        "placements": placements,
        "hidden": hidden,
        "simulated": settings.TESSERA_BACKEND == "simulated",
        "operator_actions": actions_on_node(node.name) if ops else [],
        "gpu_health": node_health(node.pk),
    }
    return render(request, "scheduling/node_detail.html", context)


# URL verb -> what the audit trail calls it; "fail" only on the simulated cluster.
NODE_ACTIONS = {
    "cordon": Kind.CORDON,
    "uncordon": Kind.UNCORDON,
    "drain": Kind.DRAIN,
    "fail": Kind.NODE_FAILURE,
}
GPU_ACTIONS = {
    "healthy": Kind.GPU_HEALTHY,
    "unhealthy": Kind.GPU_UNHEALTHY,
    "fail": Kind.GPU_FAILURE,
}
SIMULATED_ONLY = {Kind.NODE_FAILURE, Kind.GPU_FAILURE}


def _operator_action_kind(table: dict[str, Kind], verb: str) -> Kind:
    kind = table.get(verb)
    if kind is None or (kind in SIMULATED_ONLY and settings.TESSERA_BACKEND != "simulated"):
        raise Http404(f"No action {verb!r} here.")
    return kind


def _run_node_action(node: Node, kind: Kind, reason: str, actor: Any) -> str:
    if kind == Kind.CORDON:
        services.cordon_node(node.pk, reason=reason, actor=actor)
        return f"Node {node.name} cordoned: it takes no new work."
    if kind == Kind.UNCORDON:
        services.uncordon_node(node.pk, reason=reason, actor=actor)
        return f"Node {node.name} accepts new work again."
    if kind == Kind.DRAIN:
        ids = services.drain_node(node.pk, reason=reason, actor=actor)
        return f"Node {node.name} drained: {len(ids)} workloads requeued."
    ids = services.fail_node(node.pk, reason=reason, actor=actor)
    return f"Simulated failure of {node.name}: {len(ids)} workloads requeued."


def _run_gpu_action(gpu: Gpu, kind: Kind, reason: str, actor: Any) -> str:
    label = f"GPU {gpu.index} of {gpu.node.name}"
    if kind == Kind.GPU_HEALTHY:
        services.set_gpu_health(gpu.pk, healthy=True, reason=reason, actor=actor)
        return f"{label} marked healthy."
    if kind == Kind.GPU_UNHEALTHY:
        ids = services.set_gpu_health(gpu.pk, healthy=False, reason=reason, actor=actor)
        return f"{label} marked unhealthy: {len(ids)} workloads requeued."
    ids = services.fail_gpu(gpu.pk, reason=reason, actor=actor)
    return f"Simulated failure of {label}: {len(ids)} workloads requeued."


def _confirm_operator_action(
    request: HttpRequest,
    *,
    kind: Kind,
    title: str,
    impact: ActionImpact,
    run: Callable[[str], str],
    back: str,
) -> HttpResponse:
    """GET: the confirmation (what will happen, the reason field). POST: do it (redirect to `back`),
    or show the confirmation again with the form errors (400), nothing done."""
    data = request.POST if request.method == "POST" else None
    form = ReasonForm(data, reason_required=kind in REASON_REQUIRED)
    if request.method == "POST" and form.is_valid():
        try:
            done = run(form.cleaned_data["reason"])
        except DomainError as exc:
            form.add_error("reason" if "reason" in exc.fields else None, exc.message)
        else:
            messages.success(request, done)
            return redirect(back)
    context = {
        "title": title,
        "impact": impact,
        "form": form,
        "button": Kind(kind).label,
        "danger": kind not in (Kind.UNCORDON, Kind.GPU_HEALTHY),
        "cancel_url": back,
    }
    return render(request, "portal/confirm.html", context, status=400 if form.errors else 200)


@login_required
@require_http_methods(["GET", "POST"])
def node_action(request: HttpRequest, node_id: int, action: str) -> HttpResponse:
    """Confirm, then cordon / uncordon / drain / (simulated) fail a node."""
    _require_operator(request)
    node = get_object_or_404(Node, pk=node_id)
    kind = _operator_action_kind(NODE_ACTIONS, action)
    return _confirm_operator_action(
        request,
        kind=kind,
        title=f"{Kind(kind).label} {node.name}?",
        impact=node_action_impact(node, kind),
        run=lambda reason: _run_node_action(node, kind, reason, request.user),
        back=reverse("scheduling:node", kwargs={"node_id": node.pk}),
    )


@login_required
@require_http_methods(["GET", "POST"])
def gpu_action(request: HttpRequest, gpu_id: int, action: str) -> HttpResponse:
    """Confirm, then mark a GPU healthy / unhealthy or (simulated) fail it."""
    _require_operator(request)
    gpu = get_object_or_404(Gpu.objects.select_related("node"), pk=gpu_id)
    kind = _operator_action_kind(GPU_ACTIONS, action)
    return _confirm_operator_action(
        request,
        kind=kind,
        title=f"{Kind(kind).label}: GPU {gpu.index} of {gpu.node.name}?",
        impact=gpu_action_impact(gpu, kind),
        run=lambda reason: _run_gpu_action(gpu, kind, reason, request.user),
        back=reverse("scheduling:node", kwargs={"node_id": gpu.node_id}),
    )


def _my_quotas(user: Any) -> Any:
    return scope_queryset(Quota.objects.select_related("group", "tenant"), user).order_by(
        "tenant__slug", "group__name"
    )


@login_required
def jobs(request: HttpRequest) -> HttpResponse:
    user = current_user(request)
    form = JobForm(request.POST or None, quotas=_my_quotas(user))
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        member = {
            "cpu_milli": d["cpu_milli"],
            "memory_mib": d["memory_mib"],
            "gpu_count": d["gpu_count"],
            "gpu_milli": d["gpu_milli"] if d["gpu_count"] else 0,
            "gpu_memory_mib": (d["gpu_memory_mib"] or 0) if d["gpu_count"] else 0,
        }
        try:
            gang = services.submit_gang(
                tenant=d["quota"].tenant,
                quota=d["quota"],
                name=d["name"],
                owner=user,
                members=[member] * d["pods"],
                min_available=d["min_available"] or d["pods"],
                timeout_seconds=d["timeout_seconds"],
                priority=d["priority"],
                preemptible=d["preemptible"],
                topology_level=d["topology_level"],
                topology_mode=d["topology_mode"] or GangTopologyMode.REQUIRED,
            )
        except DomainError as exc:
            form.add_domain_error(exc)
        else:
            messages.success(request, f"Job {gang.name} submitted: {d['pods']} pods.")
            return redirect("scheduling:job", job_id=gang.pk)
    gangs = scope_queryset(Gang.objects.select_related("tenant", "owner"), user).order_by(
        "-created_at"
    )[:100]
    return render(request, "scheduling/jobs.html", {"form": form, "gangs": gangs})


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    active = Prefetch(
        "placements",
        queryset=Placement.objects.filter(released_at__isnull=True)
        .select_related("node")
        .prefetch_related("gpu_shares__gpu"),
    )
    gang = get_scoped_or_404(
        Gang.objects.select_related("tenant", "owner"), request.user, pk=job_id
    )
    members = list(gang.members.order_by("pk").prefetch_related(active))
    user = current_user(request)
    context = {
        "gang": gang,
        "members": members,
        "active": sum(m.state in ACTIVE_STATES for m in members),
        "can_cancel": (gang.owner_id == user.pk or can_admin_tenant(user, gang.tenant_id))
        and gang.state in (GangState.WAITING, GangState.PLACED, GangState.RUNNING),
        "start_estimates": estimates_for(members),
        "moved_by_operators": [
            operator_notice(e)
            for e in actions_on_workloads([m.pk for m in members])
            if e.actor_name
        ],
    }
    return render(request, "scheduling/job_detail.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    """GET: the one confirmation (what stops). POST: cancel the job."""
    gang = get_scoped_or_404(Gang.objects.all(), request.user, pk=job_id)
    user = current_user(request)
    if not (gang.owner_id == user.pk or can_admin_tenant(user, gang.tenant_id)):
        raise PermissionDenied("Only the job's owner or a team admin can cancel it.")
    if request.method == "GET":
        context = {
            "title": f"Cancel job {gang.name}?",
            "impact": job_cancel_impact(gang),
            "form": None,
            "button": "Cancel job",
            "danger": True,
            "cancel_url": reverse("scheduling:job", kwargs={"job_id": gang.pk}),
        }
        return render(request, "portal/confirm.html", context)
    services.cancel_gang(gang.pk, reason=f"Cancelled by {user.get_username()}.")
    messages.success(request, f"Job {gang.name} cancelled; everything it held is released.")
    return redirect("scheduling:job", job_id=gang.pk)


@login_required
def workload_detail(request: HttpRequest, workload_id: int) -> HttpResponse:
    w = get_scoped_or_404(
        Workload.objects.select_related("tenant", "quota__group", "gang", "owner"),
        request.user,
        pk=workload_id,
    )
    placement = (
        Placement.objects.filter(workload=w, released_at__isnull=True)
        .select_related("node")
        .prefetch_related("gpu_shares__gpu")
        .first()
    )
    since = timezone.now() - timedelta(hours=1)
    use = gpu_use_by_workload([w.pk], since).get(w.pk)
    context = {"w": w, "placement": placement, "start_estimate": estimate_for(w), "gpu_use": use}
    return render(request, "scheduling/workload_detail.html", context)


@login_required
def audit(request: HttpRequest) -> HttpResponse:
    """Operators: the last run of the invariant auditor, each invariant's status and its findings."""
    require_operator(request.user)
    run = latest_run()
    return render(
        request,
        "scheduling/audit.html",
        {"run": run, "invariants": invariant_statuses(run)},
    )


def _seconds_text(seconds: float) -> str:
    """A wait as people read it: 45 s, 2.5 min, 1.2 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@login_required
def what_if(request: HttpRequest) -> HttpResponse:
    """Operators: replay a pool's recorded demand (or an uploaded trace, POST) as it is and with a
    change, side by side."""
    require_operator(request.user)
    if request.method == "POST":
        form = WhatIfForm(request.POST, request.FILES)
    else:
        form = WhatIfForm(request.GET if "group" in request.GET else None)
    context: dict[str, Any] = {"form": form, "report": None}
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        change = WhatIfChange(
            add_model=data["add_model"],
            add_count=data["add_count"],
            remove_model=data["remove_model"],
            remove_count=data["remove_count"],
            policy=data["policy"],
            team_gpus=data["team_gpus"],
            sharing_mode=data["sharing_mode"],
            mig_profiles=data["mig_profiles"],
            timeslice_replicas=data["timeslice_replicas"] or 1,
        )
        try:
            upload = data.get("trace")
            trace = None if upload is None else parse_trace(upload.read(MAX_TRACE_BYTES + 1))
            report = run_whatif(data["group"], data["days"], change, trace=trace)
        except InvalidInput as exc:
            for name, reasons in exc.fields.items():
                form.add_error(name if name in form.fields else None, reasons)
        else:
            runs = (report.baseline, report.changed)
            teams = sorted({t for r in runs for t in (*r.team_waits_p95, *r.team_never_started)})
            context.update(
                report=report,
                runs=[
                    {
                        "run": r,
                        "waits": [
                            _seconds_text(w)
                            for w in (r.summary.waits.p50, r.summary.waits.p95, r.summary.waits.p99)
                        ],
                    }
                    for r in runs
                ],
                teams=[
                    {
                        "team": t or "—",
                        "cells": [
                            (
                                _seconds_text(r.team_waits_p95[t])
                                if t in r.team_waits_p95
                                else "—",
                                r.team_never_started.get(t, 0),
                            )
                            for r in runs
                        ],
                    }
                    for t in teams
                ],
                allocation_figure=what_if_figure(
                    "Allocated GPUs", "GPUs", [(r.label, r.hours, r.allocated_gpus) for r in runs]
                ),
                queue_figure=what_if_figure(
                    "Waiting requests", "requests", [(r.label, r.hours, r.waiting) for r in runs]
                ),
            )
    return render(request, "scheduling/what_if.html", context)
