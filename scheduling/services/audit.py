"""The invariant auditor: what the scheduler promises, checked against the source of truth.

Each invariant is one named query over the live database that returns the rows violating it, with the
ids, names and the numbers on both sides an operator needs (docs/operations.md "Invariant auditor"). The
same module serves `manage.py audit`, the periodic `audit_invariants_task` (its results are stored in
`InvariantAuditRun` for the operators' page and `/metrics`) and the chaos suite (tests/chaos/): one
source of truth for "is the state consistent".

Checks that a moving system passes through for a moment (a codespace following its workload, a pod
being created after its placement commits, a workload waiting for its first cycle) only count rows older
than `grace`; the accounting checks (over-commit, quota usage, one placement per workload) hold at every
commit and have no grace.

The codespace check is the codespaces app's (`codespaces.audit`, installed by
`install_codespace_check`): scheduling sits below codespaces in the layering (.importlinter) and does
not import it, and the check derives the phase with the same function the pages use.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from core.units import MILLI_PER_GPU
from quotas.loans import min_gpus, unassigned_gpus
from quotas.models import (
    LoanState,
    Quota,
    QuotaChange,
    QuotaGroup,
    QuotaLoan,
    ReclaimNotice,
    ReclaimNoticeState,
)
from quotas.resources import DIMENSIONS, Resources, Side
from quotas.usage import default_reservation, group_snapshot
from scheduling.choices import ACTIVE_STATES, WorkloadState
from scheduling.models import (
    Gang,
    Gpu,
    InvariantAuditRun,
    Node,
    Placement,
    PlacementGpu,
    Reservation,
    SimulatedPod,
    Workload,
)
from scheduling.telemetry.models import QuotaSample

logger = logging.getLogger(__name__)

Finding = dict[str, Any]
"""One violating row: JSON-serializable ids, names and numbers."""


@dataclass(frozen=True, slots=True)
class AuditContext:
    """When the audit runs and how old a transient mismatch must be before it counts."""

    now: datetime
    grace: timedelta
    backend: str

    @property
    def settled_before(self) -> datetime:
        return self.now - self.grace


@dataclass(frozen=True, slots=True)
class Invariant:
    """A named promise and the query that lists the rows breaking it."""

    name: str
    description: str
    check: Callable[[AuditContext], list[Finding]]
    backends: tuple[str, ...] = ()  # empty = every backend


@dataclass(frozen=True, slots=True)
class InvariantResult:
    """One invariant's outcome: `checked=False` when it does not apply to the configured backend."""

    name: str
    description: str
    checked: bool
    findings: tuple[Finding, ...] = ()
    error: str = ""

    @property
    def count(self) -> int:
        return len(self.findings)

    @property
    def status(self) -> str:
        if not self.checked:
            return "skipped"
        if self.error:
            return "error"
        return "violated" if self.findings else "ok"


@dataclass(frozen=True, slots=True)
class AuditReport:
    """Every invariant's result, in INVARIANTS order."""

    started_at: datetime
    duration_ms: float
    results: tuple[InvariantResult, ...] = field(default_factory=tuple)

    @property
    def violations(self) -> int:
        return sum(r.count for r in self.results)

    @property
    def counts(self) -> dict[str, int]:
        """Violations per checked invariant (an invariant whose query failed is left out)."""
        return {r.name: r.count for r in self.results if r.checked and not r.error}

    @property
    def errors(self) -> dict[str, str]:
        return {r.name: r.error for r in self.results if r.error}

    def result(self, name: str) -> InvariantResult:
        return next(r for r in self.results if r.name == name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at.isoformat(),
            "duration_ms": round(self.duration_ms, 1),
            "violations": self.violations,
            "invariants": [
                {
                    "name": r.name,
                    "description": r.description,
                    "status": r.status,
                    "count": r.count,
                    "error": r.error,
                    "findings": list(r.findings),
                }
                for r in self.results
            ],
        }


# ------------------------------------------------------------------------------------------ helpers


def _active_placements() -> Any:
    return Placement.objects.filter(released_at__isnull=True)


def _active_shares() -> Any:
    return PlacementGpu.objects.filter(placement__released_at__isnull=True)


# ------------------------------------------------------------------------------------------ checks


def gpu_compute_overcommitted(context: AuditContext) -> list[Finding]:
    """GPUs whose active shares add up to more than 1000 milli."""
    rows = (
        _active_shares()
        .values("gpu_id", "gpu__uuid", "gpu__index", "gpu__node__name")
        .annotate(used=Sum("gpu_milli"), shares=Count("id"))
        .filter(used__gt=MILLI_PER_GPU)
        .order_by("gpu_id")
    )
    return [
        {
            "gpu_id": r["gpu_id"],
            "gpu": f"{r['gpu__node__name']}/gpu{r['gpu__index']}",
            "uuid": r["gpu__uuid"],
            "shares": r["shares"],
            "used_milli": int(r["used"]),
            "capacity_milli": MILLI_PER_GPU,
        }
        for r in rows
    ]


def gpu_memory_overcommitted(context: AuditContext) -> list[Finding]:
    """GPUs whose active shares hold more memory than the card has."""
    rows = (
        _active_shares()
        .values("gpu_id", "gpu__uuid", "gpu__index", "gpu__node__name", "gpu__memory_mib")
        .annotate(used=Sum("gpu_memory_mib"), shares=Count("id"))
        .filter(used__gt=F("gpu__memory_mib"))
        .order_by("gpu_id")
    )
    return [
        {
            "gpu_id": r["gpu_id"],
            "gpu": f"{r['gpu__node__name']}/gpu{r['gpu__index']}",
            "uuid": r["gpu__uuid"],
            "shares": r["shares"],
            "used_memory_mib": int(r["used"]),
            "capacity_memory_mib": int(r["gpu__memory_mib"]),
        }
        for r in rows
    ]


def node_overcommitted(context: AuditContext) -> list[Finding]:
    """Nodes whose active placements use more CPU or memory than the node has, or whose CPU-only
    placements reach into the share of a GPU node kept for GPU work."""
    nodes = {
        n.pk: n
        for n in Node.objects.filter(placements__released_at__isnull=True).distinct().order_by()
    }
    if not nodes:
        return []
    with_gpus = set(
        Gpu.objects.filter(node_id__in=nodes).values_list("node_id", flat=True).distinct()
    )
    reservations = {
        r.node_id: (int(r.cpu_milli), int(r.memory_mib))
        for r in Reservation.objects.filter(node_id__in=nodes)
    }
    sums = (
        _active_placements()
        .filter(node_id__in=nodes)
        .values("node_id")
        .annotate(
            cpu=Sum("cpu_milli"),
            memory=Sum("memory_mib"),
            cpu_only_cpu=Sum("cpu_milli", filter=Q(workload__gpu_count=0)),
            cpu_only_memory=Sum("memory_mib", filter=Q(workload__gpu_count=0)),
        )
        .order_by("node_id")
    )
    findings: list[Finding] = []
    for r in sums:
        node = nodes[r["node_id"]]
        cpu, memory = int(r["cpu"] or 0), int(r["memory"] or 0)
        base = {"node_id": node.pk, "node": node.name}
        if cpu > node.cpu_milli or memory > node.memory_mib:
            findings.append(
                base
                | {
                    "rule": "capacity",
                    "used_cpu_milli": cpu,
                    "capacity_cpu_milli": int(node.cpu_milli),
                    "used_memory_mib": memory,
                    "capacity_memory_mib": int(node.memory_mib),
                }
            )
        if node.pk not in with_gpus:
            continue
        kept_cpu, kept_memory = reservations.get(node.pk) or default_reservation(node)
        limit_cpu = int(node.cpu_milli) - kept_cpu
        limit_memory = int(node.memory_mib) - kept_memory
        cpu_only_cpu = int(r["cpu_only_cpu"] or 0)
        cpu_only_memory = int(r["cpu_only_memory"] or 0)
        if cpu_only_cpu > limit_cpu or cpu_only_memory > limit_memory:
            findings.append(
                base
                | {
                    "rule": "reservation",
                    "cpu_only_cpu_milli": cpu_only_cpu,
                    "cpu_only_limit_cpu_milli": limit_cpu,
                    "cpu_only_memory_mib": cpu_only_memory,
                    "cpu_only_limit_memory_mib": limit_memory,
                }
            )
    return findings


def placement_per_workload(context: AuditContext) -> list[Finding]:
    """Exactly one active placement for every placed or running workload, none for any other."""
    rows = (
        Workload.objects.annotate(
            active=Count("placements", filter=Q(placements__released_at__isnull=True))
        )
        .filter(
            Q(active__gt=1)
            | (Q(state__in=ACTIVE_STATES) & Q(active=0))
            | (~Q(state__in=ACTIVE_STATES) & Q(active__gt=0))
        )
        .values("id", "name", "kind", "state", "tenant__slug", "active")
        .order_by("id")
    )
    return [
        {
            "workload_id": r["id"],
            "workload": r["name"],
            "kind": r["kind"],
            "tenant": r["tenant__slug"],
            "state": r["state"],
            "active_placements": r["active"],
            "expected": 1 if r["state"] in ACTIVE_STATES else 0,
        }
        for r in rows
    ]


def _placed_per_quota() -> dict[tuple[int, Side], Resources]:
    """Per (quota, side): the sum of what active placements hold (GPU memory from their GPU shares)."""
    held: dict[tuple[int, Side], Resources] = defaultdict(Resources)
    for r in (
        _active_placements()
        .values("workload__quota_id", "workload__gpu_count")
        .annotate(cpu=Sum("cpu_milli"), memory=Sum("memory_mib"), gpu=Sum("gpu_milli_total"))
        .order_by()
    ):
        side = Side.GPU if r["workload__gpu_count"] else Side.CPU
        held[(r["workload__quota_id"], side)] += Resources(
            gpu_milli=int(r["gpu"] or 0),
            cpu_milli=int(r["cpu"] or 0),
            memory_mib=int(r["memory"] or 0),
        )
    for r in (
        _active_shares()
        .values("placement__workload__quota_id", "placement__workload__gpu_count")
        .annotate(memory=Sum("gpu_memory_mib"))
        .order_by()
    ):
        side = Side.GPU if r["placement__workload__gpu_count"] else Side.CPU
        held[(r["placement__workload__quota_id"], side)] += Resources(
            gpu_memory_mib=int(r["memory"] or 0)
        )
    return held


def quota_usage_matches_placements(context: AuditContext) -> list[Finding]:
    """Per quota, side and dimension: the usage the product shows and admits against (quotas.usage
    snapshot) equals what the active placements hold."""
    held = _placed_per_quota()
    findings: list[Finding] = []
    for group in QuotaGroup.objects.order_by("name"):
        snapshot = group_snapshot(group, headroom=False)
        for usage in snapshot.ordered():
            for side in (Side.GPU, Side.CPU):
                shown = usage.side(side).used
                placed = held.pop((usage.quota_id, side), Resources())
                findings.extend(
                    {
                        "quota_id": usage.quota_id,
                        "quota": f"{group.name}/{usage.name}",
                        "side": side.value,
                        "dimension": dimension,
                        "used": shown.get(dimension),
                        "placed": placed.get(dimension),
                    }
                    for dimension in DIMENSIONS
                    if shown.get(dimension) != placed.get(dimension)
                )
    # Placements of quotas no group snapshot covers cannot exist (a quota always has a group); a
    # leftover here is a placement charged to nothing.
    for (quota_id, side), placed in sorted(held.items(), key=lambda item: str(item[0])):
        findings.extend(
            {
                "quota_id": quota_id,
                "quota": "(not in any group)",
                "side": side.value,
                "dimension": dimension,
                "used": 0,
                "placed": placed.get(dimension),
            }
            for dimension in DIMENSIONS
            if placed.get(dimension)
        )
    return findings


def gang_partially_placed(context: AuditContext) -> list[Finding]:
    """Gangs holding some placements but fewer members placed than their `min_available`."""
    rows = (
        Gang.objects.annotate(
            placed=Count("members", filter=Q(members__state__in=ACTIVE_STATES)),
            size=Count("members"),
        )
        .filter(placed__gt=0, placed__lt=F("min_available"))
        .values("id", "name", "tenant__slug", "state", "min_available", "placed", "size")
        .order_by("id")
    )
    return [
        {
            "gang_id": r["id"],
            "gang": r["name"],
            "tenant": r["tenant__slug"],
            "state": r["state"],
            "members": r["size"],
            "placed_members": r["placed"],
            "min_available": r["min_available"],
        }
        for r in rows
    ]


Check = Callable[[AuditContext], list[Finding]]
_codespace_checks: dict[str, Check] = {}


def install_codespace_check(check: Check, name: str = "codespace_state") -> None:
    """Install one of the codespaces app's checks (from its AppConfig.ready()): `codespace_state`
    derives a codespace's phase with the one function that does (`codespaces.phase.observe`),
    `codespace_suspended` reads codespace rows; this layer cannot import that app. Installing again
    under the same name replaces it."""
    _codespace_checks[name] = check


def _installed(name: str, context: AuditContext) -> list[Finding]:
    check = _codespace_checks.get(name)
    return check(context) if check is not None else []


def codespace_agrees_with_workload(context: AuditContext) -> list[Finding]:
    """A codespace's stored state (the cache of its phase) equals the phase derived from its desired
    state and its workload (after `grace`), and every queued, placed, starting or running codespace has
    a workload: the installed check's findings (`codespaces.audit`); none installed, none found."""
    return _installed("codespace_state", context)


def suspended_codespace_restartable(context: AuditContext) -> list[Finding]:
    """A codespace whose reclaim notice was executed (suspended), still on that workload and not
    being deleted, is stopped (so its owner can start it again) and its workload mounted the
    codespace's home volume (kept across the suspension): the installed check's findings
    (`codespaces.audit.suspended_codespace_findings`); none installed, none found."""
    return _installed("codespace_suspended", context)


NOT_YET_CONSIDERED_CODE = "queued"
"""The pending code a workload gets on submit or requeue, before any cycle has looked at it."""


def workload_explained(context: AuditContext) -> list[Finding]:
    """Every accepted request is placed, waiting with a reason a cycle gave it (after `grace`: a
    cycle or two), or failed with a message. Still "waiting for the next scheduling cycle" after
    grace means no cycle considered it."""
    rows = (
        Workload.objects.filter(
            Q(state=WorkloadState.PENDING, updated_at__lt=context.settled_before)
            & (Q(pending_reason="") | Q(pending_code=NOT_YET_CONSIDERED_CODE))
            | Q(state=WorkloadState.FAILED, failure_reason="")
        )
        .values("id", "name", "kind", "state", "tenant__slug", "pending_reason", "updated_at")
        .order_by("id")
    )
    return [
        {
            "workload_id": r["id"],
            "workload": r["name"],
            "kind": r["kind"],
            "tenant": r["tenant__slug"],
            "state": r["state"],
            "missing": "pending_reason"
            if r["state"] == WorkloadState.PENDING
            else "failure_reason",
            "reason": r["pending_reason"],
            "since": r["updated_at"].isoformat(),
        }
        for r in rows
    ]


def backend_matches_placements(context: AuditContext) -> list[Finding]:
    """The simulated cluster runs a pod for every placed or running workload (after `grace`) and no
    pod for a workload without an active placement."""
    active = {
        r["workload_id"]: r
        for r in _active_placements()
        .filter(workload__state__in=ACTIVE_STATES)
        .values("workload_id", "workload__name", "node__name", "created_at")
    }
    pods = {
        p["workload_id"]: p
        for p in SimulatedPod.objects.values("workload_id", "name", "node_name", "created_at")
    }
    findings: list[Finding] = []
    for workload_id in sorted(set(pods) - set(active)):
        pod = pods[workload_id]
        if pod["created_at"] < context.settled_before:
            findings.append(
                {
                    "problem": "orphaned backend object",
                    "workload_id": workload_id,
                    "object": pod["name"],
                    "node": pod["node_name"],
                }
            )
    for workload_id in sorted(set(active) - set(pods)):
        placement = active[workload_id]
        if placement["created_at"] < context.settled_before:
            findings.append(
                {
                    "problem": "placement without backend object",
                    "workload_id": workload_id,
                    "object": placement["workload__name"],
                    "node": placement["node__name"],
                }
            )
    for workload_id in sorted(set(active) & set(pods)):
        if pods[workload_id]["node_name"] != active[workload_id]["node__name"]:
            findings.append(
                {
                    "problem": "backend object on another node",
                    "workload_id": workload_id,
                    "object": pods[workload_id]["name"],
                    "node": pods[workload_id]["node_name"],
                    "placed_on": active[workload_id]["node__name"],
                }
            )
    return findings


# ------------------------------------------------------------------ fairness over time (issue 17)


def loans_within_what_lenders_have(context: AuditContext) -> list[Finding]:
    """Approved loans in their window at `now`: a lending quota lends no more GPUs than its own min
    (its effective min never goes below 0), and the operators lend no more than the group's GPUs
    that no quota's min promises (the group's mins, loans included, never exceed its capacity)."""
    now = context.now
    active = QuotaLoan.objects.filter(state=LoanState.APPROVED, starts_at__lte=now, ends_at__gt=now)
    findings: list[Finding] = []
    lent = {
        r["lender_id"]: (int(r["gpus"]), int(r["loans"]))
        for r in active.filter(lender__isnull=False)
        .values("lender_id")
        .annotate(gpus=Sum("gpus"), loans=Count("id"))
        .order_by()
    }
    for lender in Quota.objects.filter(pk__in=list(lent)).select_related("group").order_by("id"):
        gpus, loans = lent[lender.pk]
        own = min_gpus(lender)
        if gpus > own:
            findings.append(
                {
                    "rule": "lender's min",
                    "quota_id": lender.pk,
                    "quota": f"{lender.group.name}/{lender.name}",
                    "loans": loans,
                    "lent_gpus": gpus,
                    "min_gpus": own,
                    "effective_min_gpus": own - gpus,
                }
            )
    groups = active.filter(lender__isnull=True).values_list("group_id", flat=True).distinct()
    for group in QuotaGroup.objects.filter(pk__in=list(groups)).order_by("name"):
        if group.allow_overcommitted_min:
            continue
        capacity, promised, by_operators = unassigned_gpus(
            group, now, now + timedelta(microseconds=1)
        )
        if promised + by_operators > capacity:
            findings.append(
                {
                    "rule": "group capacity",
                    "group": group.name,
                    "capacity_gpus": capacity,
                    "min_gpus": promised,
                    "lent_by_operators_gpus": by_operators,
                }
            )
    return findings


def loan_changes_audited(context: AuditContext) -> list[Finding]:
    """Every loan's every version (its request and each transition after it) has its QuotaChange
    (subject "loan") on the borrowing quota and on the lending one, the latest one naming the loan's
    current state."""
    audited: dict[tuple[int, int], dict[int, str]] = defaultdict(dict)
    for quota_id, after, version in QuotaChange.objects.filter(subject="loan").values_list(
        "quota_id", "after", "version"
    ):
        if isinstance(after, dict) and isinstance(after.get("loan"), int):
            audited[(int(after["loan"]), int(quota_id))][int(version)] = str(after.get("state"))
    findings: list[Finding] = []
    loans = QuotaLoan.objects.filter(created_at__lt=context.settled_before).values_list(
        "id", "state", "version", "borrower_id", "lender_id"
    )
    for loan_id, state, version, borrower_id, lender_id in loans.order_by("id"):
        for quota_id in (q for q in (borrower_id, lender_id) if q is not None):
            rows = audited.get((loan_id, quota_id), {})
            missing = [v for v in range(1, int(version) + 1) if v not in rows]
            latest = rows.get(int(version), "")
            if missing or latest != state:
                findings.append(
                    {
                        "loan_id": loan_id,
                        "quota_id": quota_id,
                        "state": state,
                        "version": int(version),
                        "versions_not_audited": missing,
                        "audited_state": latest or "(none)",
                    }
                )
    return findings


def reclaim_notice_closed(context: AuditContext) -> list[Finding]:
    """No reclaim notice is still open (NOTICED) a cycle after its deadline (plus `grace`): by then
    the cycle has stopped its workload (EXECUTED) or, the pressure gone or the workload no longer
    running, cancelled it. The finding says whether its workload still runs."""
    slack = timedelta(seconds=2 * float(settings.TESSERA_CYCLE_INTERVAL_SECONDS))
    overdue = ReclaimNotice.objects.filter(
        state=ReclaimNoticeState.NOTICED, deadline__lt=context.settled_before - slack
    ).select_related("group", "quota")
    rows = list(overdue.order_by("id"))
    states = dict(
        Workload.objects.filter(pk__in=[n.workload_id for n in rows]).values_list("id", "state")
    )
    return [
        {
            "notice_id": n.pk,
            "quota": f"{n.group.name}/{n.quota.name}",
            "workload_id": n.workload_id,
            "workload": n.workload_name,
            "workload_state": states.get(n.workload_id, "(gone)"),
            "still_running": states.get(n.workload_id) in ACTIVE_STATES,
            "deadline": n.deadline.isoformat(),
        }
        for n in rows
    ]


def person_within_user_cap(context: AuditContext) -> list[Finding]:
    """No person holds more GPUs in placed or running work of a quota than its per-person cap
    (`max_gpus_per_user`; admission enforces it under the shard's lock)."""
    caps = {
        q.pk: q
        for q in Quota.objects.filter(max_gpus_per_user__isnull=False).select_related("group")
    }
    if not caps:
        return []
    held = (
        _active_placements()
        .filter(workload__quota_id__in=list(caps), workload__owner_id__isnull=False)
        .values("workload__quota_id", "workload__owner_id", "workload__owner__username")
        .annotate(milli=Sum("gpu_milli_total"), workloads=Count("id"))
        .order_by("workload__quota_id", "workload__owner_id")
    )
    findings: list[Finding] = []
    for r in held:
        quota = caps[r["workload__quota_id"]]
        cap_milli = int(quota.max_gpus_per_user or 0) * MILLI_PER_GPU
        if int(r["milli"] or 0) > cap_milli:
            findings.append(
                {
                    "quota_id": quota.pk,
                    "quota": f"{quota.group.name}/{quota.name}",
                    "user": r["workload__owner__username"],
                    "workloads": r["workloads"],
                    "held_gpu_milli": int(r["milli"] or 0),
                    "cap_gpu_milli": cap_milli,
                }
            )
    return findings


BUDGET_HORIZON = timedelta(days=32)
"""The longest budget period (a month) and a day: older samples no longer charge any budget."""


def budget_usage_counted_once(context: AuditContext) -> list[Finding]:
    """The GPU-hour usage budgets charge (QuotaSample, minute and hour rows) is never negative and
    never counts one quota's GPU model twice for the same minutes: rows of one resolution, quota and
    model never overlap in time. Only samples a budget can still charge (BUDGET_HORIZON) are read."""
    rows = (
        QuotaSample.objects.filter(ts__gte=context.now - BUDGET_HORIZON)
        .order_by("resolution", "quota_id", "gpu_model", "ts", "id")
        .values_list(
            "id", "resolution", "quota_id", "gpu_model", "ts", "minutes", "allocated_milli"
        )
    )
    findings: list[Finding] = []
    key: tuple[Any, ...] | None = None
    latest_end = context.now
    latest_id = 0
    for sample_id, resolution, quota_id, model, ts, minutes, allocated in rows.iterator(
        chunk_size=5000
    ):
        base = {
            "sample_id": sample_id,
            "resolution": resolution,
            "quota_id": quota_id,
            "gpu_model": model,
            "ts": ts.isoformat(),
        }
        if allocated < 0:
            findings.append(base | {"problem": "negative usage", "allocated_milli": allocated})
        same = key == (resolution, quota_id, model)
        if same and ts < latest_end:
            findings.append(
                base
                | {
                    "problem": "counted twice",
                    "overlaps_sample_id": latest_id,
                    "overlap_until": latest_end.isoformat(),
                }
            )
        ends = ts + timedelta(minutes=int(minutes))
        if not same or ends > latest_end:
            key, latest_end, latest_id = (resolution, quota_id, model), ends, sample_id
    return findings


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "gpu_compute",
        "No GPU is over-committed in compute (more than 100 % handed out)",
        gpu_compute_overcommitted,
    ),
    Invariant("gpu_memory", "No GPU is over-committed in memory", gpu_memory_overcommitted),
    Invariant(
        "node_capacity",
        "No node is over-committed in CPU or memory (reservations included)",
        node_overcommitted,
    ),
    Invariant(
        "one_placement",
        "Placed and running workloads hold exactly one active placement, others none",
        placement_per_workload,
    ),
    Invariant(
        "quota_usage",
        "Quota usage equals the sum of active placements in every dimension",
        quota_usage_matches_placements,
    ),
    Invariant("gang_whole", "No gang is partially placed", gang_partially_placed),
    Invariant(
        "codespace_state",
        "A codespace's state agrees with its workload's",
        codespace_agrees_with_workload,
    ),
    Invariant(
        "workload_explained",
        "Every request is placed, waiting with a reason, or failed with a message",
        workload_explained,
    ),
    Invariant(
        "loan_within_min",
        "No approved loan lends more than the lender's min, nor the operators more than the "
        "group's unassigned GPUs",
        loans_within_what_lenders_have,
    ),
    Invariant(
        "loan_audited",
        "Every loan request and state change is in both quotas' history",
        loan_changes_audited,
    ),
    Invariant(
        "reclaim_notice_closed",
        "No reclaim notice stays open a cycle past its deadline",
        reclaim_notice_closed,
    ),
    Invariant(
        "codespace_suspended",
        "A codespace suspended by a reclaim keeps its home volume and can be started again",
        suspended_codespace_restartable,
    ),
    Invariant(
        "user_cap",
        "Nobody holds more GPUs than their quota's per-person cap",
        person_within_user_cap,
    ),
    Invariant(
        "budget_usage",
        "GPU-hour usage is never negative and never counted twice for the same minutes",
        budget_usage_counted_once,
    ),
    Invariant(
        "backend_objects",
        "The backend runs an object for every active placement and none without one",
        backend_matches_placements,
        backends=("simulated",),
    ),
)
INVARIANT_NAMES: tuple[str, ...] = tuple(i.name for i in INVARIANTS)


def default_grace() -> timedelta:
    return timedelta(seconds=float(settings.TESSERA_AUDIT_GRACE_SECONDS))


def run_audit(
    *,
    now: datetime | None = None,
    grace: timedelta | None = None,
    only: Sequence[str] = (),
) -> AuditReport:
    """Run every invariant (or those named in `only`) and return their findings. Read-only; takes no
    locks, so on a busy system it reads each query's own snapshot."""
    started = timezone.now()
    context = AuditContext(
        now=now or started,
        grace=default_grace() if grace is None else grace,
        backend=str(settings.TESSERA_BACKEND),
    )
    results = []
    for invariant in INVARIANTS:
        if only and invariant.name not in only:
            continue
        if invariant.backends and context.backend not in invariant.backends:
            results.append(InvariantResult(invariant.name, invariant.description, checked=False))
            continue
        try:
            findings = tuple(invariant.check(context))
        except Exception as exc:  # one broken check must not hide what the others find
            logger.exception("audit: invariant %s could not be checked", invariant.name)
            results.append(
                InvariantResult(
                    invariant.name,
                    invariant.description,
                    checked=True,
                    error=f"{type(exc).__name__}: {exc}"[:500],
                )
            )
            continue
        results.append(
            InvariantResult(invariant.name, invariant.description, checked=True, findings=findings)
        )
    duration = (timezone.now() - started).total_seconds() * 1000
    return AuditReport(started_at=started, duration_ms=duration, results=tuple(results))


RUNS_KEPT = 100
"""How many InvariantAuditRun rows the periodic task keeps (older ones are deleted)."""


def record_audit(report: AuditReport) -> InvariantAuditRun:
    """Store a report as the latest InvariantAuditRun (at most TESSERA_AUDIT_MAX_FINDINGS findings per
    invariant) and delete all but the newest RUNS_KEPT runs."""
    limit = int(settings.TESSERA_AUDIT_MAX_FINDINGS)
    run = InvariantAuditRun.objects.create(
        started_at=report.started_at,
        duration_ms=round(report.duration_ms, 1),
        violations=report.violations,
        counts=report.counts,
        errors=report.errors,
        findings={r.name: list(r.findings[:limit]) for r in report.results if r.findings},
    )
    stale = InvariantAuditRun.objects.order_by("-started_at", "-id").values_list("pk", flat=True)[
        RUNS_KEPT:
    ]
    InvariantAuditRun.objects.filter(pk__in=list(stale)).delete()
    return run


def latest_run() -> InvariantAuditRun | None:
    return InvariantAuditRun.objects.order_by("-started_at", "-id").first()


@dataclass(frozen=True, slots=True)
class InvariantStatus:
    """One invariant as a stored run saw it (for the operators' page and /metrics)."""

    name: str
    description: str
    status: str  # "ok", "violated", "error", "skipped" or "never run"
    count: int
    error: str
    findings: tuple[Finding, ...]
    columns: tuple[str, ...]


def invariant_statuses(run: InvariantAuditRun | None) -> list[InvariantStatus]:
    """Every invariant, in INVARIANTS order, with what `run` recorded about it."""
    statuses = []
    for invariant in INVARIANTS:
        findings: tuple[Finding, ...] = ()
        error = ""
        count = 0
        if run is None:
            status = "never run"
        elif invariant.name in run.errors:
            status, error = "error", str(run.errors[invariant.name])
        elif invariant.name not in run.counts:
            status = "skipped"
        else:
            count = int(run.counts[invariant.name])
            findings = tuple(run.findings.get(invariant.name, ()))
            status = "violated" if count else "ok"
        columns = tuple(dict.fromkeys(key for finding in findings for key in finding))
        statuses.append(
            InvariantStatus(
                invariant.name, invariant.description, status, count, error, findings, columns
            )
        )
    return statuses
