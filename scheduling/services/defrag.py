"""Safe defragmentation as plans-as-data (docs/scheduling.md, "Defragmentation").

**Preview** (`preview_defrag`): read the pool (fresh engine snapshot, the running workloads the disruption
policy lets move, the waiting ones that found no capacity), let the engine choose the moves
(`core.placement.defrag.plan_defrag`), and store the plan (DefragPlan, one DefragMove per move, each with
the sentence its owner will read). Nothing else changes.

**Apply** (`apply_defrag`): PREVIEWED → APPLYING (compare-and-set, committed), then one transaction under the
shard lock: every move is checked against the database (the workload still runs on the placement it had
when planned, each unlocked request still waits), owners are told (before), the moved workloads are
requeued through the one requeue path (codespaces keep their home volume), and the placements are written
at once: each moved workload on its planned target and each unlocked request on the capacity freed for it
(the reservation: no cycle can take it in between, the shard lock is held), re-checked under node locks
like a cycle's; owners are told (after); the plan becomes APPLIED with its result. Any check that fails rolls
the whole transaction back (no partial state) and the plan becomes FAILED with the reason. A retry of the
apply returns the stored answer.

**Scheduled** (`run_scheduled_defrag`): per pool, expire stale plans; when scheduled runs are on, preview a
plan and apply it inside a maintenance window, or outside one when the waiting GPU demand it unlocks
reaches the threshold. One pool that raises does not stop the others.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.placement import GPU_MILLI, Assignment
from core.placement.defrag import REFUSALS, Move, plan_defrag
from core.placement.defrag import DefragPlan as EnginePlan
from portal.errors import Conflict, InvalidInput, NotFoundError
from portal.notifications import deliver
from portal.periodic import ItemFailures, run_each
from quotas.models import QuotaGroup
from scheduling import defrag_hooks
from scheduling.choices import ACTIVE_STATES, DefragPlanState, DefragTrigger, WorkloadState
from scheduling.lock_objects import lock_shard
from scheduling.models import DefragMove, DefragPlan, Placement, Workload
from scheduling.services.cycle import StaleSnapshot, commit_assignments
from scheduling.services.defrag_policy import (
    Candidates,
    DefragPolicy,
    movable_workloads,
    waiting_workloads,
)
from scheduling.services.snapshot import (
    GroupCluster,
    build_group_cluster,
    ensure_shard,
    forget,
    workload_request,
)
from scheduling.services.workloads import requeue_workloads

logger = logging.getLogger(__name__)
S = DefragPlanState
REQUEUE_CODE = "defragmented"
MAX_REASON = 480
#: Reasons a plan's `considered` lists, each kind (most common first).
MAX_CONSIDERED_REASONS = 10


# ------------------------------------------------------------------------------------------ preview
def _label(w: Workload) -> str:
    kind = "codespace" if w.kind == "codespace" else "job"
    name = w.gang.name if w.gang is not None else w.name
    return f"{kind} {w.tenant.slug}/{name}"


def _shape(w: Workload) -> str:
    if not w.gpu_count:
        return "CPU"
    if w.gpu_milli >= GPU_MILLI:
        return f"{w.gpu_count}-GPU"
    return f"{w.gpu_milli / GPU_MILLI:.2f}-GPU"


def _move_reason(move: Move, cluster: GroupCluster, unlocked: dict[str, Workload]) -> str:
    """The sentence the moved workload's owner reads: what it frees, and for what."""
    node = cluster.nodes.get(move.from_node)
    model = f" {node.gpu_model}" if node is not None and node.gpu_model else ""
    n = len(move.from_gpus)
    freed = f"{n}{model} GPU{'s' if n != 1 else ''} on {move.from_node}" if n else move.from_node
    target = unlocked.get(move.from_node)
    if target is not None:
        why = f"Moved to free {freed} for a waiting {_shape(target)} {_label(target)}"
    else:
        why = f"Moved to free {freed} as whole GPUs for larger requests"
    return f"{why} (defragmentation); restarted on {move.to_node}."[:MAX_REASON]


def _counted(reasons: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """Reasons with how often each occurs, most common first (then alphabetically), bounded."""
    counts: dict[str, int] = {}
    for reason, n in reasons:
        counts[reason] = counts.get(reason, 0) + n
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [
        {"reason": reason[:MAX_REASON], "count": n}
        for reason, n in ordered[:MAX_CONSIDERED_REASONS]
    ]


def _considered(
    candidates: Candidates, waiting: list[Workload], plan: EnginePlan
) -> dict[str, Any]:
    """What an operator reads under a plan (most of all an empty one): what it looked at, why the
    policy kept each other workload in place, and what the planner refused, in words."""
    waiting_n, running_n, movable_n = len(waiting), len(candidates.rows), len(candidates.movable)
    may = "none may move" if not movable_n else f"{movable_n} may move"
    summary = (
        f"Looked at {waiting_n} waiting request{'s' if waiting_n != 1 else ''} and {running_n} "
        f"running workload{'s' if running_n != 1 else ''}; {may}."
    )
    return {
        "summary": summary,
        "waiting": waiting_n,
        "running": running_n,
        "movable": movable_n,
        "kept": _counted((why, 1) for why in candidates.refused.values()),
        "planner": _counted((REFUSALS.get(code, code), n) for code, n in plan.refusals),
    }


def _unlock_assignment(
    cluster: GroupCluster, w: Workload, node: str, gpus: tuple[int, ...]
) -> Assignment:
    """Where an unlocked request goes: the GPUs the plan freed for it (a whole card takes the card's
    memory, as the placer records it)."""
    r = workload_request(w)
    if r.is_whole_gpu:
        memory = min((cluster.gpu_memory[(node, j)] for j in gpus), default=0)
        milli = GPU_MILLI
    elif r.is_cpu_only:
        memory, milli, gpus = 0, 0, ()
    else:
        memory, milli = r.gpu_memory_mib, r.gpu_milli
    return Assignment(str(w.pk), node, tuple(gpus), milli, memory, r.cpu_milli, r.memory_mib)


def _group(group_id: Any) -> QuotaGroup:
    try:
        pk = int(group_id)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            "group: expected a node pool id.", fields={"group": ["A whole number."]}
        ) from exc
    group = QuotaGroup.objects.filter(pk=pk).first()
    if group is None:
        raise InvalidInput("group: no such node pool.", fields={"group": ["Unknown id."]})
    return group


def preview_defrag(
    group_id: Any,
    *,
    actor: Any = None,
    trigger: str = DefragTrigger.OPERATOR,
    now: datetime | None = None,
    policy: DefragPolicy | None = None,
) -> DefragPlan:
    """Plan a defragmentation of the pool and store it as PREVIEWED (expires after the plan TTL).
    Changes nothing else. An empty plan (no move helps) is stored too: its `value` says so."""
    group = _group(group_id)
    policy = policy or DefragPolicy.from_settings()
    now = now or timezone.now()
    shard = ensure_shard(group.pk)
    cluster = build_group_cluster(group, shard.version)
    candidates = movable_workloads(group, cluster, policy, now)
    waiting = waiting_workloads(group)
    engine_plan: EnginePlan = plan_defrag(
        cluster.state,
        [workload_request(w) for w in waiting],
        candidates.movable,
        policy.limits(candidates.per_team),
    )
    by_id = {str(w.pk): w for w in waiting}
    unlocked = {u.node: by_id[u.request_id] for u in engine_plan.unlocks}
    unlocks = [
        {
            "workload": int(u.request_id),
            "name": _label(by_id[u.request_id]),
            "shape": _shape(by_id[u.request_id]),
            "node": u.node,
            "gpus": list(u.gpus),
        }
        for u in engine_plan.unlocks
    ]
    value = engine_plan.value
    for u in engine_plan.unlocks:  # the engine names requests by id; people read names
        value = value.replace(f"request {u.request_id}", _label(by_id[u.request_id]))
    with transaction.atomic():
        plan = DefragPlan.objects.create(
            group=group,
            trigger=trigger,
            requested_by=actor if getattr(actor, "pk", None) else None,
            shard_version=shard.version,
            value=value[:500],
            freed_whole_gpus=max(0, engine_plan.freed_whole_gpus),
            freed_whole_nodes=max(0, engine_plan.freed_whole_nodes),
            cost_seconds=engine_plan.cost_seconds,
            unlocks=unlocks,
            considered=_considered(candidates, waiting, engine_plan),
            expires_at=now + timedelta(seconds=policy.plan_ttl_seconds),
        )
        DefragMove.objects.bulk_create(
            [
                DefragMove(
                    plan=plan,
                    workload_id=int(m.workload_id),
                    tenant_id=candidates.rows[int(m.workload_id)].tenant_id,
                    placement_id=_placement_of(int(m.workload_id)),
                    from_node=m.from_node,
                    from_gpus=list(m.from_gpus),
                    to_node=m.to_node,
                    to_gpus=list(m.to_gpus),
                    gpu_milli=m.gpu_milli,
                    gpu_memory_mib=m.gpu_memory_mib,
                    target_gpu_memory_mib=m.target_gpu_memory_mib,
                    cpu_milli=m.cpu_milli,
                    memory_mib=m.memory_mib,
                    cost_seconds=m.cost_seconds,
                    running_seconds=_running_seconds(candidates.rows[int(m.workload_id)], now),
                    reason=_move_reason(m, cluster, unlocked),
                )
                for m in engine_plan.moves
            ]
        )
    logger.info("defrag plan %s of %s previewed: %s", plan.pk, group.name, plan.value)
    return plan


def _placement_of(workload_id: int) -> int:
    pk = (
        Placement.objects.filter(workload_id=workload_id, released_at__isnull=True)
        .values_list("pk", flat=True)
        .first()
    )
    return int(pk or 0)


def _running_seconds(w: Workload, now: datetime) -> int:
    return max(0, int((now - w.started_at).total_seconds())) if w.started_at else 0


# ------------------------------------------------------------------------------------------ apply
class _Refused(Exception):
    """The plan no longer matches the database: nothing was changed (the transaction rolls back)."""


def _set_state(plan: DefragPlan, expected: str, new: str, **fields: Any) -> bool:
    """Compare-and-set the plan's state; True when this caller made the transition."""
    done = DefragPlan.objects.filter(pk=plan.pk, state=expected).update(state=new, **fields)
    if done:
        plan.state = new
        for k, v in fields.items():
            setattr(plan, k, v)
    return bool(done)


def _check_still_valid(plan: DefragPlan, moves: list[DefragMove]) -> dict[int, Workload]:
    """Lock and re-read every workload of the plan; raise _Refused naming the first that changed."""
    unlock_ids = [int(u["workload"]) for u in plan.unlocks]
    ids = sorted({m.workload_id for m in moves} | set(unlock_ids))
    rows = {
        w.pk: w
        for w in Workload.objects.select_for_update(of=("self",))
        .filter(pk__in=ids)
        .select_related("tenant", "gang", "owner")
        .order_by("pk")
    }
    held = dict(
        Placement.objects.filter(workload_id__in=ids, released_at__isnull=True).values_list(
            "workload_id", "pk"
        )
    )
    for m in moves:
        w = rows.get(m.workload_id)
        if w is None or w.state not in ACTIVE_STATES or held.get(m.workload_id) != m.placement_id:
            raise _Refused(f"workload {m.workload_id} moved or stopped since the preview")
    for wid in unlock_ids:
        w = rows.get(wid)
        if w is None or w.state != WorkloadState.PENDING:
            raise _Refused(f"the waiting workload {wid} is no longer waiting")
    return rows


def _notices(
    plan: DefragPlan, moves: list[DefragMove], rows: dict[int, Workload], stage: str
) -> None:
    by_kind: dict[str, list[defrag_hooks.MoveNotice]] = {}
    for m in moves:
        by_kind.setdefault(rows[m.workload_id].kind, []).append(
            defrag_hooks.MoveNotice(m.workload_id, plan.pk, stage, m.reason, m.from_node, m.to_node)
        )
    for kind, notices in by_kind.items():
        defrag_hooks.tell(kind, notices)


def _email_owners(plan: DefragPlan, moves: list[DefragMove], rows: dict[int, Workload]) -> None:
    """After commit: each owner with an email address gets one message per moved workload."""
    messages = []
    for m in moves:
        owner = rows[m.workload_id].owner
        if owner is not None and owner.email:
            messages.append(
                (owner.email, f"Your {_label(rows[m.workload_id])} was moved", m.reason, m.pk)
            )

    def send() -> None:
        for email, subject, body, move_id in messages:
            deliver([email], "", subject, body, {"defrag_plan": plan.pk, "defrag_move": move_id})

    if messages:
        transaction.on_commit(send)


def _execute(plan: DefragPlan, actor: Any, now: datetime) -> dict[str, Any]:
    """The moves, in the caller's transaction (see the module docstring). Raises _Refused or
    StaleSnapshot when the plan no longer fits; the caller's transaction then rolls back."""
    lock_shard(plan.group_id)
    moves = list(plan.moves.order_by("pk"))
    rows = _check_still_valid(plan, moves)
    _notices(plan, moves, rows, "before")
    for m in moves:
        requeued = requeue_workloads([m.workload_id], reason=m.reason, code=REQUEUE_CODE)
        if requeued != [m.workload_id]:
            raise _Refused(f"workload {m.workload_id} could not be requeued alone")
    group = QuotaGroup.objects.get(pk=plan.group_id)
    shard = ensure_shard(group.pk)
    cluster = build_group_cluster(group, shard.version)
    assignments = [
        Assignment(
            str(m.workload_id),
            m.to_node,
            tuple(m.to_gpus),
            m.gpu_milli,
            m.target_gpu_memory_mib,
            m.cpu_milli,
            m.memory_mib,
        )
        for m in moves
    ] + [
        _unlock_assignment(cluster, rows[int(u["workload"])], u["node"], tuple(u["gpus"]))
        for u in plan.unlocks
    ]
    for a in assignments:
        if a.node not in cluster.nodes:
            raise _Refused(f"node {a.node} is no longer in the pool")
    fresh = {
        w.pk: w for w in Workload.objects.filter(pk__in=[int(a.request_id) for a in assignments])
    }
    placed = commit_assignments(cluster, assignments, fresh, now)
    DefragMove.objects.filter(plan=plan).update(moved_at=now)
    _notices(plan, moves, rows, "after")
    _email_owners(plan, moves, rows)
    forget(group.pk)
    return {
        "moved": [m.workload_id for m in moves],
        "started": [int(u["workload"]) for u in plan.unlocks],
        "placed": sorted(placed),
        "applied_by": actor.get_username() if getattr(actor, "pk", None) else "scheduled",
    }


def apply_defrag(plan_id: Any, *, actor: Any = None, now: datetime | None = None) -> DefragPlan:
    """Apply a previewed plan once (see the module docstring). A plan already applied or failed is
    returned as it is (the original answer); an expired one, or one being applied, is a Conflict."""
    try:
        pk = int(plan_id)
    except (TypeError, ValueError) as exc:
        raise NotFoundError(f"Defragmentation plan {str(plan_id)[:20]!r} does not exist.") from exc
    plan = DefragPlan.objects.filter(pk=pk).first()
    if plan is None:
        raise NotFoundError(f"Defragmentation plan {pk} does not exist.")
    now = now or timezone.now()
    if plan.state in (S.APPLIED, S.FAILED):
        return plan
    if plan.state == S.PREVIEWED and plan.expires_at <= now:
        _set_state(plan, S.PREVIEWED, S.EXPIRED)
        plan.refresh_from_db()
    if plan.state == S.EXPIRED:
        raise Conflict(
            f"Defragmentation plan {pk} expired at {plan.expires_at:%H:%M:%S} UTC: the cluster may "
            "have changed since; preview a new plan.",
            fields={"state": ["expired"]},
        )
    user = actor if getattr(actor, "pk", None) else None
    if not _set_state(plan, S.PREVIEWED, S.APPLYING, applied_by=user, applied_at=now):
        plan.refresh_from_db()
        if plan.state in (S.APPLIED, S.FAILED):
            return plan
        raise Conflict(
            f"Defragmentation plan {pk} is being applied.", fields={"state": [str(plan.state)]}
        )
    try:
        with transaction.atomic():
            result = _execute(plan, actor, now)
            _set_state(plan, S.APPLYING, S.APPLIED, result=result)
    except (_Refused, StaleSnapshot, IntegrityError) as exc:
        forget(plan.group_id)
        why = f"Nothing was moved: {exc}"[:500]
        _set_state(plan, S.APPLYING, S.FAILED, error=why, result={"moved": [], "started": []})
        logger.warning("defrag plan %s failed: %s", plan.pk, why)
    except BaseException:
        _set_state(plan, S.APPLYING, S.FAILED, error="Nothing was moved: an internal error.")
        raise
    else:
        logger.info("defrag plan %s applied: %s", plan.pk, plan.result)
    plan.refresh_from_db()
    return plan


# ------------------------------------------------------------------------------------------ scheduled
def expire_plans(now: datetime | None = None) -> int:
    """PREVIEWED plans past their expiry become EXPIRED; APPLYING ones left by a crashed worker (older
    than a day) become FAILED. Returns how many changed."""
    now = now or timezone.now()
    n = DefragPlan.objects.filter(state=S.PREVIEWED, expires_at__lte=now).update(state=S.EXPIRED)
    n += DefragPlan.objects.filter(
        state=S.APPLYING, applied_at__lte=now - timedelta(days=1)
    ).update(state=S.FAILED, error="Interrupted while applying; the worker stopped.")
    return n


@dataclass
class ScheduledReport:
    """What one scheduled run did, per pool name: the plans applied and the pools skipped (and why)."""

    applied: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    failures: ItemFailures = field(default_factory=ItemFailures)


def unlocked_gpus(plan: DefragPlan) -> float:
    """The waiting GPU demand a plan lets start, in GPUs."""
    total = 0.0
    for u in plan.unlocks:
        shape = str(u.get("shape", ""))
        if shape.endswith("-GPU"):
            try:
                total += float(shape.removesuffix("-GPU"))
            except ValueError:
                continue
    return total


def run_scheduled_defrag(
    now: datetime | None = None, policy: DefragPolicy | None = None
) -> ScheduledReport:
    """The periodic task's body (see the module docstring)."""
    now = now or timezone.now()
    policy = policy or DefragPolicy.from_settings()
    report = ScheduledReport()
    expire_plans(now)
    if not policy.scheduled:
        report.skipped["*"] = "scheduled defragmentation is off (TESSERA_DEFRAG_SCHEDULED)"
        return report
    in_window = policy.in_window(now)

    def one(group: QuotaGroup) -> None:
        plan = preview_defrag(group.pk, trigger=DefragTrigger.SCHEDULED, now=now, policy=policy)
        if not plan.moves.exists():
            _set_state(plan, S.PREVIEWED, S.EXPIRED)
            report.skipped[group.name] = "no move helps"
            return
        demand = unlocked_gpus(plan)
        threshold = policy.demand_threshold_gpus
        if not in_window and not (threshold and demand >= threshold):
            _set_state(plan, S.PREVIEWED, S.EXPIRED)
            report.skipped[group.name] = (
                f"outside the maintenance window and {demand:g} waiting GPUs unlocked "
                f"(threshold {threshold})"
            )
            return
        applied = apply_defrag(plan.pk, now=now)
        if applied.state == S.APPLIED:
            report.applied[group.name] = applied.pk
        else:
            report.skipped[group.name] = applied.error

    run_each(
        QuotaGroup.objects.order_by("pk"),
        one,
        task="defrag",
        kind="pool",
        failures=report.failures,
    )
    return report
