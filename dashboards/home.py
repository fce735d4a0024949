"""The home page's status per persona, from the same services the detailed pages use:

- everyone in a team (developer): their codespaces and what each costs per hour while it holds GPUs
  (TESSERA_GPU_HOUR_PRICES through telemetry's `price_for`, as chargeback prices them), and what they
  can start now in the active team (the slice picker's headroom and largest free slice);
- team admins: each administered team's quota use (the quota snapshot, in GPUs, GiB and CPUs) and its
  pending requests;
- operators: cluster allocation (the cluster page's totals), pending requests, unhealthy GPUs and the
  drift the invariant auditor found in its last run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import F, Sum

from codespaces import services as codespace_services
from codespaces.models import Codespace
from core.units import MILLI_PER_GPU, MILLI_PER_PERCENT, mib_to_gib
from portal.models import Tenant
from portal.scoping import admin_tenant_ids_for, is_operator
from quotas.models import Quota
from quotas.resources import Side, human_short
from quotas.usage import GroupSnapshot, group_snapshot
from scheduling.choices import WorkloadState
from scheduling.models import Gpu, InvariantAuditRun, Workload
from scheduling.services.audit import InvariantStatus, invariant_statuses, latest_run
from scheduling.services.cluster_view import cluster_totals
from scheduling.services.preview import largest_free_slice
from scheduling.telemetry.series import gpu_hour_prices, price_for

MAX_ROWS = 20  # per list on the home page; each list links to its full page
CENT = Decimal("0.01")


@dataclass(frozen=True)
class CodespaceCost:
    """One of my codespaces and its price per hour now (0 unless it holds GPUs)."""

    codespace: Codespace
    gpus_held: float
    price_per_gpu_hour: Decimal
    cost_per_hour: Decimal


@dataclass(frozen=True)
class StartNow:
    """What a quota of the active team lets me start now (the slice picker's numbers)."""

    quota: Quota
    headroom_gpus: float
    headroom_gpu_memory_gib: float
    largest_free_slice_percent: int
    largest_free_slice_gib: float


@dataclass(frozen=True)
class DeveloperStatus:
    codespaces: list[CodespaceCost]
    running_cost_per_hour: Decimal
    start_now: list[StartNow]


@dataclass(frozen=True)
class QuotaUse:
    """A team quota's use in human units, from the quota snapshot the quota pages show."""

    quota: Quota
    gpus_used: str
    gpus_guaranteed: str
    gpus_max: str
    gpu_memory_used: str
    gpus_pending: str
    cpus_used: str
    memory_used: str


@dataclass(frozen=True)
class PendingRequest:
    workload: Workload
    gpus: str
    reason: str


@dataclass(frozen=True)
class TeamStatus:
    tenant: Tenant
    quotas: list[QuotaUse]
    pending_count: int
    pending: list[PendingRequest]


@dataclass(frozen=True)
class OperatorStatus:
    gpus: int
    healthy_gpus: int
    gpus_allocated: str
    allocation_percent: int
    nodes: int
    cordoned_nodes: int
    unhealthy_nodes: int
    pending_count: int
    pending_gpus: str
    unhealthy_gpus: list[Gpu]
    audit_run: InvariantAuditRun | None
    audit_started_at: datetime | None
    drift: list[InvariantStatus]


@dataclass(frozen=True)
class HomeStatus:
    developer: DeveloperStatus | None
    teams: list[TeamStatus]
    operator: OperatorStatus | None


def _gpus(milli: int) -> str:
    return human_short("gpu_milli", milli)


def codespace_costs(user: Any) -> tuple[list[CodespaceCost], Decimal]:
    """My codespaces (the "My codespaces" list) with their price per hour, and the sum of those."""
    prices = gpu_hour_prices()
    rows = []
    for codespace in codespace_services.visible_codespaces(user, scope="mine").order_by("name")[
        :MAX_ROWS
    ]:
        held = codespace.gpu_fraction if codespace.holds_placement else 0.0
        price = price_for(codespace.gpu_model_placed or codespace.gpu_model, prices)
        cost = (Decimal(str(held)) * price).quantize(CENT)
        rows.append(CodespaceCost(codespace, held, price, cost))
    return rows, sum((row.cost_per_hour for row in rows), start=Decimal("0.00"))


def start_now(tenant: Tenant) -> list[StartNow]:
    """Per quota of the team: the picker's headroom and the pool's largest free slice."""
    rows = []
    for quota in list(codespace_services.quotas_for_tenant(tenant))[:MAX_ROWS]:
        headroom = codespace_services.quota_headroom(quota)
        if not headroom:
            continue
        milli, memory_mib = largest_free_slice(quota.group)
        rows.append(
            StartNow(
                quota=quota,
                headroom_gpus=headroom["headroom_gpus"],
                headroom_gpu_memory_gib=headroom["headroom_gpu_memory_gib"],
                largest_free_slice_percent=milli // MILLI_PER_PERCENT,
                largest_free_slice_gib=round(mib_to_gib(memory_mib), 1),
            )
        )
    return rows


def developer_status(user: Any, tenant: Tenant | None) -> DeveloperStatus:
    codespaces, total = codespace_costs(user)
    return DeveloperStatus(
        codespaces=codespaces,
        running_cost_per_hour=total,
        start_now=start_now(tenant) if tenant is not None else [],
    )


def _pending(workloads: Any) -> list[PendingRequest]:
    return [
        PendingRequest(
            workload=w,
            gpus=_gpus(w.gpu_count * w.gpu_milli) if w.gpu_count else "CPU only",
            reason=w.pending_reason,
        )
        for w in workloads.select_related("owner", "quota").order_by("submitted_at", "pk")[
            :MAX_ROWS
        ]
    ]


def team_status(tenant: Tenant) -> TeamStatus:
    """A team's quota use (one snapshot per pool, as the quota pages) and its pending requests."""
    snapshots: dict[int, GroupSnapshot] = {}
    quotas = []
    for quota in (
        Quota.objects.filter(tenant=tenant)
        .select_related("group", "tenant")
        .order_by("group__name", "name")
    ):
        if quota.group_id not in snapshots:
            snapshots[quota.group_id] = group_snapshot(quota.group)
        usage = snapshots[quota.group_id].quota(quota.pk)
        gpu, cpu = usage.side(Side.GPU), usage.side(Side.CPU)
        quotas.append(
            QuotaUse(
                quota=quota,
                gpus_used=_gpus(gpu.used.gpu_milli),
                gpus_guaranteed=_gpus(gpu.min.gpu_milli),
                gpus_max=_gpus(gpu.max.gpu_milli),
                gpu_memory_used=human_short("gpu_memory_mib", gpu.used.gpu_memory_mib),
                gpus_pending=_gpus(gpu.pending.gpu_milli),
                cpus_used=human_short("cpu_milli", gpu.used.cpu_milli + cpu.used.cpu_milli),
                memory_used=human_short("memory_mib", gpu.used.memory_mib + cpu.used.memory_mib),
            )
        )
    pending = Workload.objects.filter(tenant=tenant, state=WorkloadState.PENDING)
    return TeamStatus(
        tenant=tenant, quotas=quotas, pending_count=pending.count(), pending=_pending(pending)
    )


def operator_status() -> OperatorStatus:
    """The cluster page's totals, the pending queue, unhealthy GPUs and the auditor's last findings."""
    totals = cluster_totals()
    pending = Workload.objects.filter(state=WorkloadState.PENDING)
    pending_milli = pending.aggregate(m=Sum(F("gpu_count") * F("gpu_milli")))["m"] or 0
    run = latest_run()
    drift = [s for s in invariant_statuses(run) if s.status in ("violated", "error")]
    return OperatorStatus(
        gpus=totals["gpus"],
        healthy_gpus=totals["healthy_gpus"],
        gpus_allocated=_gpus(totals["gpu_milli_used"]),
        allocation_percent=(
            round(100 * totals["gpu_milli_used"] / (MILLI_PER_GPU * totals["gpus"]))
            if totals["gpus"]
            else 0
        ),
        nodes=totals["nodes"],
        cordoned_nodes=totals["cordoned"],
        unhealthy_nodes=totals["unhealthy_nodes"],
        pending_count=pending.count(),
        pending_gpus=_gpus(int(pending_milli)),
        unhealthy_gpus=list(
            Gpu.objects.filter(healthy=False)
            .select_related("node")
            .order_by("node__name", "index")[:MAX_ROWS]
        ),
        audit_run=run,
        audit_started_at=run.started_at if run is not None else None,
        drift=drift,
    )


def home_status(user: Any, active_tenant: Tenant | None) -> HomeStatus:
    """What the home page shows `user`: each part only for the persona it serves (a member of a
    team or an owner of codespaces: the developer part; a tenant admin: their teams; an operator:
    the cluster)."""
    member = user.memberships.exists()
    owns = codespace_services.visible_codespaces(user, scope="mine").exists()
    admin_ids = sorted(admin_tenant_ids_for(user))
    return HomeStatus(
        developer=(
            developer_status(user, active_tenant if member else None) if member or owns else None
        ),
        teams=[team_status(t) for t in Tenant.objects.filter(pk__in=admin_ids)[:MAX_ROWS]],
        operator=operator_status() if is_operator(user) else None,
    )
