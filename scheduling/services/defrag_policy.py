"""The disruption policy of defragmentation: which running workloads may move, what each move costs, the
budget per team, and when scheduled runs may act (docs/scheduling.md, "Defragmentation").

A workload may move when all of these hold (the first that fails is its reason):
- it runs (RUNNING, one active placement), it is preemptible and `movable` (a per-workload exemption);
- its team and quota are not exempt (`TESSERA_DEFRAG_EXEMPT_TENANTS`, `TESSERA_DEFRAG_EXEMPT_QUOTAS`
  as `tenant/quota`);
- it has run at least `TESSERA_DEFRAG_MIN_RUNTIME_SECONDS` (and the pool's own minimum runtime);
- it is no MIG instance and no member of a gang of several pods (a gang moves whole or not at all);
- its app agrees (`scheduling.defrag_hooks`: a codespace only when its template allows it and it is idle
  or its owner consented);
- its team has budget left: fewer than `TESSERA_DEFRAG_MAX_MOVES_PER_TEAM_PER_DAY` moves in the last 24
  hours, and the plan may move at most `TESSERA_DEFRAG_MAX_TEAM_RUNNING_PERCENT` % of its running work
  (rounded down, but at least one move when the percentage is not 0: a team's only idle codespace may
  move).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta

from django.conf import settings
from django.db.models import Count

from core.placement.defrag import DefragLimits, MoveCandidate
from quotas.models import QuotaGroup
from scheduling import defrag_hooks
from scheduling.choices import WorkloadKind, WorkloadState
from scheduling.models import DefragMove, Workload
from scheduling.services.snapshot import GroupCluster

#: Waiting workloads a plan looks at (queue order), and running ones it may consider moving.
MAX_WAITING = 100
MAX_CANDIDATES = 5000
#: Waiting codes that mean "admitted, but no capacity": what moving work can change.
CAPACITY_CODES = (
    "insufficient_gpu",
    "gpu_memory",
    "insufficient_cpu",
    "insufficient_memory",
    "reserved",
    "topology",
)


@dataclass(frozen=True, slots=True)
class DefragPolicy:
    """The settings of the disruption policy, read once per plan (see the module docstring)."""

    min_runtime_seconds: int
    max_moves_per_plan: int
    max_moves_per_team_per_day: int
    max_team_running_percent: int
    max_cost_seconds_per_move: int
    max_total_cost_seconds: int
    codespace_restart_seconds: int
    job_restart_seconds: int
    exempt_tenants: frozenset[str]
    exempt_quotas: frozenset[str]
    windows: tuple[tuple[time, time], ...]
    demand_threshold_gpus: int
    scheduled: bool
    plan_ttl_seconds: int

    @classmethod
    def from_settings(cls) -> DefragPolicy:
        return cls(
            min_runtime_seconds=settings.TESSERA_DEFRAG_MIN_RUNTIME_SECONDS,
            max_moves_per_plan=settings.TESSERA_DEFRAG_MAX_MOVES_PER_PLAN,
            max_moves_per_team_per_day=settings.TESSERA_DEFRAG_MAX_MOVES_PER_TEAM_PER_DAY,
            max_team_running_percent=settings.TESSERA_DEFRAG_MAX_TEAM_RUNNING_PERCENT,
            max_cost_seconds_per_move=settings.TESSERA_DEFRAG_MAX_COST_SECONDS_PER_MOVE,
            max_total_cost_seconds=settings.TESSERA_DEFRAG_MAX_TOTAL_COST_SECONDS,
            codespace_restart_seconds=settings.TESSERA_DEFRAG_CODESPACE_RESTART_SECONDS,
            job_restart_seconds=settings.TESSERA_DEFRAG_JOB_RESTART_SECONDS,
            exempt_tenants=frozenset(settings.TESSERA_DEFRAG_EXEMPT_TENANTS),
            exempt_quotas=frozenset(settings.TESSERA_DEFRAG_EXEMPT_QUOTAS),
            windows=tuple(parse_window(w) for w in settings.TESSERA_DEFRAG_WINDOWS),
            demand_threshold_gpus=settings.TESSERA_DEFRAG_DEMAND_THRESHOLD_GPUS,
            scheduled=settings.TESSERA_DEFRAG_SCHEDULED,
            plan_ttl_seconds=settings.TESSERA_DEFRAG_PLAN_TTL_SECONDS,
        )

    def in_window(self, now: datetime) -> bool:
        """Whether `now` (aware; compared in UTC) falls in a maintenance window; a window whose end is
        before its start runs over midnight."""
        utc = now.astimezone(UTC)
        moment = time(utc.hour, utc.minute)
        for start, end in self.windows:
            if start <= end and start <= moment < end:
                return True
            if start > end and (moment >= start or moment < end):
                return True
        return False

    def limits(self, per_team: int) -> DefragLimits:
        return DefragLimits(
            max_moves=self.max_moves_per_plan,
            max_moves_per_owner=per_team,
            max_total_cost_seconds=self.max_total_cost_seconds,
            max_cost_seconds_per_move=self.max_cost_seconds_per_move,
        )


def parse_window(raw: str) -> tuple[time, time]:
    """'01:00-05:00' -> (01:00, 05:00) (validated by the settings)."""
    start, end = raw.split("-")
    h1, m1 = start.split(":")
    h2, m2 = end.split(":")
    return time(int(h1), int(m1)), time(int(h2), int(m2))


@dataclass(frozen=True, slots=True)
class Candidates:
    """What the policy lets the engine move, and why the others stay (workload id -> sentence)."""

    movable: tuple[MoveCandidate, ...]
    rows: dict[int, Workload]
    refused: dict[int, str]
    per_team: int


def team_allowance(
    policy: DefragPolicy, tenant_ids: Sequence[int], now: datetime
) -> dict[int, int]:
    """Moves each team may still take in one plan: what is left of its day (24 h rolling) and of its
    running-work share (floor of the percentage of its running workloads)."""
    ids = sorted(set(tenant_ids))
    moved = dict(
        DefragMove.objects.filter(
            tenant_id__in=ids, moved_at__isnull=False, moved_at__gte=now - timedelta(days=1)
        )
        .values("tenant_id")
        .annotate(n=Count("pk"))
        .values_list("tenant_id", "n")
    )
    running = dict(
        Workload.objects.filter(tenant_id__in=ids, state=WorkloadState.RUNNING)
        .values("tenant_id")
        .annotate(n=Count("pk"))
        .values_list("tenant_id", "n")
    )
    out: dict[int, int] = {}
    for t in ids:
        day_left = max(0, policy.max_moves_per_team_per_day - int(moved.get(t, 0)))
        count = int(running.get(t, 0))
        share = count * policy.max_team_running_percent // 100
        if count and policy.max_team_running_percent:
            share = max(1, share)  # a team's one idle codespace may still move, one at a time
        out[t] = min(day_left, share)
    return out


def _refusal(w: Workload, policy: DefragPolicy, group: QuotaGroup, now: datetime) -> str | None:
    if w.state != WorkloadState.RUNNING:
        return "it is not running"
    if not w.preemptible:
        return "it is not preemptible"
    if not w.movable:
        return "it is exempt from defragmentation"
    if w.tenant.slug in policy.exempt_tenants:
        return f"team {w.tenant.slug} is exempt from defragmentation"
    if f"{w.tenant.slug}/{w.quota.name}" in policy.exempt_quotas:
        return f"quota {w.tenant.slug}/{w.quota.name} is exempt from defragmentation"
    minimum = max(policy.min_runtime_seconds, group.min_runtime_seconds)
    if w.started_at is None or (now - w.started_at).total_seconds() < minimum:
        return f"it has run less than the minimum of {minimum} s before a move"
    if w.mig_profile:
        return "it holds a MIG instance"
    if w.gang_id is not None and w.gang is not None and w.gang.min_available > 1:
        return "it is one pod of a gang, which moves whole or not at all"
    return None


def movable_workloads(
    group: QuotaGroup, cluster: GroupCluster, policy: DefragPolicy, now: datetime
) -> Candidates:
    """The running workloads of the pool's nodes the policy lets move, as engine candidates (owner = the
    team, cost = the restart estimate of its kind), and why each other one stays."""
    ids = sorted(cluster.applied)[:MAX_CANDIDATES]
    rows = {
        w.pk: w
        for w in Workload.objects.filter(pk__in=ids).select_related("tenant", "quota", "gang")
    }
    refused: dict[int, str] = {}
    for wid, w in rows.items():
        why = _refusal(w, policy, group, now)
        if why is not None:
            refused[wid] = why
    by_kind: dict[str, list[int]] = {}
    for wid, w in rows.items():
        if wid not in refused:
            by_kind.setdefault(w.kind, []).append(wid)
    for kind, kind_ids in by_kind.items():
        if kind != WorkloadKind.JOB_POD:  # a preemptible job pod is requeued: scheduling's own call
            refused.update(defrag_hooks.refusals(kind, kind_ids))
    allowance = team_allowance(policy, [w.tenant_id for w in rows.values()], now)
    for wid, w in rows.items():
        if wid not in refused and allowance.get(w.tenant_id, 0) <= 0:
            refused[wid] = f"team {w.tenant.slug} has no defragmentation budget left"
    movable: list[MoveCandidate] = []
    for wid in sorted(rows):
        if wid in refused:
            continue
        w, a = rows[wid], cluster.applied[wid]
        running = int((now - w.started_at).total_seconds()) if w.started_at else 0
        movable.append(
            MoveCandidate(
                workload_id=str(wid),
                node=a.node,
                gpus=a.gpu_indices,
                gpu_milli=a.gpu_milli,
                gpu_memory_mib=a.gpu_memory_mib,
                cpu_milli=a.cpu_milli,
                memory_mib=a.memory_mib,
                cost_seconds=(
                    policy.codespace_restart_seconds
                    if w.kind == "codespace"
                    else policy.job_restart_seconds
                ),
                owner=w.tenant.slug,
                running_seconds=max(0, running),
                kind=w.kind,
                gpu_models=tuple(w.gpu_models or ()),
                node_labels=tuple(
                    sorted((str(k), str(v)) for k, v in (w.node_labels or {}).items())
                ),
            )
        )
    teams = {rows[int(c.workload_id)].tenant_id for c in movable}
    # The engine's limit is one number per owner: the smallest allowance keeps every team in budget.
    per_team = min((allowance[t] for t in teams), default=0)
    return Candidates(tuple(movable), rows, refused, per_team)


def waiting_workloads(group: QuotaGroup) -> list[Workload]:
    """The pool's PENDING workloads that the last cycle admitted but found no capacity for, in queue
    order (priority, age, id): what freed capacity can start. Gang members of several pods and MIG
    requests are left to the cycle."""
    rows = (
        Workload.objects.filter(
            quota__group_id=group.pk,
            state=WorkloadState.PENDING,
            pending_code__in=CAPACITY_CODES,
            mig_profile="",
        )
        .exclude(gang__min_available__gt=1)
        .select_related("tenant", "gang")
        .order_by("-priority", "submitted_at", "pk")
    )
    return list(rows[:MAX_WAITING])
