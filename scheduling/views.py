"""Cluster pages: nodes and GPUs (who holds each slice), per-node detail with operator actions, and gang
jobs (submit, follow, cancel). Thin: scope, call a service, render."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.errors import DomainError
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
from scheduling.choices import ACTIVE_STATES, GangState
from scheduling.forms import JobForm, ReasonForm
from scheduling.models import Gang, Gpu, Node, Placement, Shard, Workload
from scheduling.services.audit import invariant_statuses, latest_run
from scheduling.services.cluster_view import cluster_totals, node_rows


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
        "reason_form": ReasonForm(),
    }
    return render(request, "scheduling/node_detail.html", context)


NODE_ACTIONS = ("cordon", "uncordon", "drain", "fail")


@login_required
@require_POST
def node_action(request: HttpRequest, node_id: int, action: str) -> HttpResponse:
    _require_operator(request)
    node = get_object_or_404(Node, pk=node_id)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        for name, errors in form.errors.items():
            messages.error(request, f"{name}: {errors[0]} Nothing was done.")
        return redirect("scheduling:node", node_id=node.pk)
    reason = form.cleaned_data["reason"]
    if action == "cordon":
        services.cordon_node(node.pk)
        messages.success(request, f"Node {node.name} cordoned: it takes no new work.")
    elif action == "uncordon":
        services.uncordon_node(node.pk)
        messages.success(request, f"Node {node.name} accepts new work again.")
    elif action == "drain":
        ids = services.drain_node(node.pk, reason=reason)
        messages.success(request, f"Node {node.name} drained: {len(ids)} workloads requeued.")
    elif action == "fail" and settings.TESSERA_BACKEND == "simulated":
        ids = services.fail_node(node.pk)
        messages.warning(
            request, f"Simulated failure of {node.name}: {len(ids)} workloads requeued."
        )
    else:
        messages.error(request, f"Unknown action {action!r}.")
    return redirect("scheduling:node", node_id=node.pk)


@login_required
@require_POST
def gpu_action(request: HttpRequest, gpu_id: int, action: str) -> HttpResponse:
    _require_operator(request)
    gpu = get_object_or_404(Gpu.objects.select_related("node"), pk=gpu_id)
    label = f"GPU {gpu.index} of {gpu.node.name}"
    if action == "healthy":
        services.set_gpu_health(gpu.pk, healthy=True)
        messages.success(request, f"{label} marked healthy.")
    elif action == "unhealthy":
        ids = services.set_gpu_health(gpu.pk, healthy=False)
        messages.success(request, f"{label} marked unhealthy: {len(ids)} workloads requeued.")
    elif action == "fail" and settings.TESSERA_BACKEND == "simulated":
        ids = services.fail_gpu(gpu.pk)
        messages.warning(request, f"Simulated failure of {label}: {len(ids)} workloads requeued.")
    else:
        messages.error(request, f"Unknown action {action!r}.")
    return redirect("scheduling:node", node_id=gpu.node_id)


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
    }
    return render(request, "scheduling/job_detail.html", context)


@login_required
@require_POST
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    gang = get_scoped_or_404(Gang.objects.all(), request.user, pk=job_id)
    user = current_user(request)
    if not (gang.owner_id == user.pk or can_admin_tenant(user, gang.tenant_id)):
        raise PermissionDenied("Only the job's owner or a team admin can cancel it.")
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
    return render(request, "scheduling/workload_detail.html", {"w": w, "placement": placement})


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
