"""One scheduling cycle of a shard (a quota group).

lock the shard → time out expired gangs → read PENDING workloads (priority, fair share, age) → admit through
the quota tree → plan with the engine on the worker's cached snapshot → persist every placement of the cycle
in the same transaction (bulk inserts, compare-and-set PENDING→PLACED, capacity re-checked against the
database under node row locks) → record a reason and a queue position on everything left waiting → bump
the shard version → after commit: materialize on the backend, tell observers, update the cached snapshot.

Two cycles of one shard serialize on its advisory lock; two shards that share a node (overlapping
selectors) or a stale snapshot are caught by the database re-check, which rolls the cycle back and
retries it once on a fresh snapshot; the unique constraint `one_active_placement_per_workload` makes a
double placement impossible whatever happens.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Count, Sum
from django.utils import timezone

from portal.transactions import is_lock_conflict
from quotas.models import QuotaGroup
from scheduling import observers
from scheduling.choices import ACTIVE_STATES, WorkloadState
from scheduling.engine import GPU_MILLI, Assignment, GangSpec, typical_pods
from scheduling.engine.planner import plan_in_place
from scheduling.followups import followups
from scheduling.lock_objects import lock_nodes, lock_shard
from scheduling.models import Gpu, Placement, PlacementGpu, Shard, Workload
from scheduling.services.charge import mark_placed_whole_cards
from scheduling.services.quota_bridge import Admitter, Verdict, plan_reclaim_for, warm_capacity
from scheduling.services.snapshot import (
    GroupCluster,
    cached_group_cluster,
    ensure_shard,
    forget,
    remember,
    schedulable,
    workload_request,
)
from scheduling.services.workloads import (
    expire_gangs,
    refresh_gang_states,
    release_workload,
    requeue_workloads,
)

logger = logging.getLogger(__name__)


class StaleSnapshot(Exception):
    """The cycle's plan does not fit the database any more (rolled back; retried on a fresh snapshot)."""


@dataclass(frozen=True)
class CycleReport:
    """What one cycle did."""

    group_id: int
    considered: int = 0
    admitted: int = 0
    placed: int = 0
    waiting: int = 0
    refused: int = 0
    timed_out_gangs: int = 0
    reclaimed: int = 0
    snapshot_cached: bool = False
    retried: bool = False
    duration_ms: float = 0.0
    placed_ids: tuple[int, ...] = field(default=(), repr=False)


@dataclass
class _Unit:
    """A workload alone, or the pending members of one gang (admitted and placed together)."""

    members: list[Workload]
    gang_need: int = 0  # members that must be placed now for the gang to be complete (0 = no gang)

    @property
    def head(self) -> Workload:
        return self.members[0]


def _units(pending: Sequence[Workload]) -> list[_Unit]:
    gang_ids = {w.gang_id for w in pending if w.gang_id}
    active: dict[int, int] = {}
    if gang_ids:
        active = dict(
            Workload.objects.filter(gang_id__in=gang_ids, state__in=ACTIVE_STATES)
            .values("gang_id")
            .annotate(n=Count("pk"))
            .values_list("gang_id", "n")
        )
    units: list[_Unit] = []
    by_gang: dict[int, _Unit] = {}
    for w in pending:
        if not w.gang_id:
            units.append(_Unit([w]))
            continue
        unit = by_gang.get(w.gang_id)
        if unit is None:
            assert w.gang is not None
            need = max(0, w.gang.min_available - active.get(w.gang_id, 0))
            unit = by_gang[w.gang_id] = _Unit([], need)
            units.append(unit)
        unit.members.append(w)
    # A gang that is already complete places its remaining members one by one.
    out: list[_Unit] = []
    for u in units:
        if u.head.gang_id and u.gang_need == 0:
            out.extend(_Unit([m]) for m in u.members)
        else:
            out.append(u)
    return out


def _check_capacity(cluster: GroupCluster, assignments: Sequence[Assignment]) -> None:
    """Re-check the plan against the database under node row locks: no node or GPU may end up with more
    than its capacity, and nothing may land on a cordoned/unhealthy node or GPU. Raises StaleSnapshot."""
    node_ids = {cluster.nodes[a.node].pk for a in assignments}
    nodes = {n.pk: n for n in lock_nodes(node_ids)}
    cpu: dict[int, int] = defaultdict(int)
    mem: dict[int, int] = defaultdict(int)
    for row in (
        Placement.objects.filter(released_at__isnull=True, node_id__in=node_ids)
        .values("node_id")
        .annotate(c=Sum("cpu_milli"), m=Sum("memory_mib"))
    ):
        cpu[row["node_id"]] = int(row["c"] or 0)
        mem[row["node_id"]] = int(row["m"] or 0)
    gmilli: dict[int, int] = defaultdict(int)
    gmem: dict[int, int] = defaultdict(int)
    for row in (
        PlacementGpu.objects.filter(placement__released_at__isnull=True, gpu__node_id__in=node_ids)
        .values("gpu_id")
        .annotate(c=Sum("gpu_milli"), m=Sum("gpu_memory_mib"))
    ):
        gmilli[row["gpu_id"]] = int(row["c"] or 0)
        gmem[row["gpu_id"]] = int(row["m"] or 0)
    gpus = {g.pk: g for g in Gpu.objects.filter(node_id__in=node_ids)}
    for a in assignments:
        node = nodes.get(cluster.nodes[a.node].pk)
        if node is None or not schedulable(node):
            raise StaleSnapshot(f"node {a.node} is gone or no longer schedulable")
        cpu[node.pk] += a.cpu_milli
        mem[node.pk] += a.memory_mib
        if cpu[node.pk] > node.cpu_milli or mem[node.pk] > node.memory_mib:
            raise StaleSnapshot(f"node {a.node} would be over-committed")
        for idx in a.gpu_indices:
            gid = cluster.gpu_id(a.node, idx)
            g = gpus.get(gid)
            if g is None or not g.healthy:
                raise StaleSnapshot(f"GPU {idx} of {a.node} is gone or unhealthy")
            gmilli[gid] += min(a.gpu_milli, GPU_MILLI)
            gmem[gid] += a.gpu_memory_mib
            if gmilli[gid] > GPU_MILLI or gmem[gid] > g.memory_mib:
                raise StaleSnapshot(f"GPU {idx} of {a.node} would be over-committed")


def _persist(
    cluster: GroupCluster,
    assignments: Sequence[Assignment],
    by_id: dict[int, Workload],
    now: Any,
) -> list[int]:
    """Write the placements of the cycle (bulk) and move their workloads PENDING→PLACED (compare-and-set)."""
    if not assignments:
        return []
    ids = [int(a.request_id) for a in assignments]
    # Row locks in pk order first, so two writers of overlapping rows queue instead of deadlocking.
    list(Workload.objects.select_for_update().filter(pk__in=ids).order_by("pk").values_list("pk"))
    updated = Workload.objects.filter(pk__in=ids, state=WorkloadState.PENDING).update(
        state=WorkloadState.PLACED,
        placed_at=now,
        pending_reason="",
        pending_code="",
        queue_position=None,
        failure_reason="",
        updated_at=now,
    )
    if updated != len(ids):
        raise StaleSnapshot(f"{len(ids) - updated} workloads left PENDING during the cycle")
    _check_capacity(cluster, assignments)
    # A whole card is charged the card it got (a pending one was charged the largest it might get).
    mark_placed_whole_cards(
        (int(a.request_id), a.gpu_memory_mib)
        for a in assignments
        if a.gpu_indices and a.gpu_milli >= GPU_MILLI
    )
    if connection.vendor == "postgresql":
        _insert_placements_pg(cluster, assignments, by_id, now)
        return ids
    rows = [
        Placement(
            workload_id=int(a.request_id),
            node_id=cluster.nodes[a.node].pk,
            tenant_id=by_id[int(a.request_id)].tenant_id,
            cpu_milli=a.cpu_milli,
            memory_mib=a.memory_mib,
            gpu_milli_total=len(a.gpu_indices) * min(a.gpu_milli, GPU_MILLI),
            created_at=now,
        )
        for a in assignments
    ]
    Placement.objects.bulk_create(rows, batch_size=1000)
    shares = [
        PlacementGpu(
            placement_id=p.pk,
            gpu_id=cluster.gpu_id(a.node, idx),
            gpu_milli=min(a.gpu_milli, GPU_MILLI),
            gpu_memory_mib=a.gpu_memory_mib,
        )
        for p, a in zip(rows, assignments, strict=True)
        for idx in a.gpu_indices
    ]
    PlacementGpu.objects.bulk_create(shares, batch_size=2000)
    return ids


def _insert_placements_pg(
    cluster: GroupCluster, assignments: Sequence[Assignment], by_id: dict[int, Workload], now: Any
) -> None:
    """The same rows as the bulk_create path, as two INSERT ... SELECT FROM unnest(arrays) statements
    (the ORM's per-value preparation of 5,000 placements and their GPU shares cost seconds)."""
    wids = [int(a.request_id) for a in assignments]
    p_table = Placement._meta.db_table
    g_table = PlacementGpu._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {p_table} (workload_id, node_id, tenant_id, cpu_milli, memory_mib, "
            "gpu_milli_total, created_at) SELECT w, n, t, c, m, g, %s FROM unnest("
            "%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[]"
            ") AS u(w, n, t, c, m, g) RETURNING id, workload_id",
            [
                now,
                wids,
                [cluster.nodes[a.node].pk for a in assignments],
                [by_id[w].tenant_id for w in wids],
                [a.cpu_milli for a in assignments],
                [a.memory_mib for a in assignments],
                [len(a.gpu_indices) * min(a.gpu_milli, GPU_MILLI) for a in assignments],
            ],
        )
        pid = {int(w): int(p) for p, w in cur.fetchall()}
        cols: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
        for w, a in zip(wids, assignments, strict=True):
            for idx in a.gpu_indices:
                cols[0].append(pid[w])
                cols[1].append(cluster.gpu_id(a.node, idx))
                cols[2].append(min(a.gpu_milli, GPU_MILLI))
                cols[3].append(a.gpu_memory_mib)
        if cols[0]:
            cur.execute(
                f"INSERT INTO {g_table} (placement_id, gpu_id, gpu_milli, gpu_memory_mib) "
                "SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])",
                list(cols),
            )


#: Engine reasons that mean "not enough free capacity" (reclaim can help), as opposed to constraints.
CAPACITY_REASONS = {
    "insufficient_gpu",
    "gpu_memory",
    "insufficient_cpu",
    "insufficient_memory",
    "gang_incomplete",
    "reserved",
}


def _reclaim(
    group: QuotaGroup, admitter: Admitter, admitted: Sequence[_Unit], unplaced: dict[int, Any]
) -> tuple[set[int], str, list[int]] | None:
    """The quota rule: a unit admitted within its runtime share that found no capacity takes back
    capacity lent to sibling quotas. Executes quotas.reclaim's plan for the first such unit (one claim per
    cycle, so nothing is stopped twice for one request): job pods are requeued, codespaces released (their
    observer stops them; homes are kept). Returns (claimant ids, reason shown to them, victim ids)."""
    if admitter.snapshot is None:
        return None
    for u in admitted:
        why = [unplaced[m.pk] for m in u.members if m.pk in unplaced]
        if not why or not all(x.reason.value in CAPACITY_REASONS for x in why):
            continue
        plan = plan_reclaim_for(
            group, admitter.snapshot, u.members if u.gang_need else u.members[0]
        )
        if plan is None or not plan.victims:
            continue
        victims = list(plan.victims)
        jobs: list[int] = []
        stopped: list[int] = []
        kinds = dict(
            Workload.objects.filter(
                pk__in=[i for v in victims for i in v.workload_ids], state__in=ACTIVE_STATES
            ).values_list("pk", "kind")
        )
        reasons = {i: v.reason for v in victims for i in v.workload_ids}
        for wid, kind in sorted(kinds.items()):
            (stopped if kind == "codespace" else jobs).append(wid)
        for wid in stopped:
            release_workload(wid, reason=f"Reclaimed: {reasons[wid]}")
        for v in victims:
            ids = [i for i in v.workload_ids if i in jobs]
            if ids:
                requeue_workloads(ids, reason=f"Reclaimed: {v.reason}", code="reclaimed")
        names = ", ".join(v.name for v in victims)
        message = (
            f"Taking back capacity lent to other quotas: stopping {names}; it starts when they have "
            "stopped."
        )
        logger.info("cycle %s: reclaim for %s: %s", group, [m.pk for m in u.members], message)
        return {m.pk for m in u.members}, message, sorted(kinds)
    return None


def _sort_key(admitter: Admitter, unit: _Unit) -> tuple[Any, ...]:
    w = unit.head
    return (
        -max(m.priority for m in unit.members),
        admitter.share_ratio(w.quota_id, w.uses_gpu),
        w.submitted_at,
        w.pk,
    )


def _run_once(
    group: QuotaGroup, *, limit: int, policy: str
) -> tuple[CycleReport, GroupCluster | None]:
    t0 = time.perf_counter()
    with transaction.atomic():
        lock_shard(group.pk)
        # The clock is read once the lock is held: another cycle of the shard may have kept us
        # waiting, and deadlines, placed_at and last_cycle_at must be the time this cycle acted at.
        now = timezone.now()
        shard = Shard.objects.get(group_id=group.pk)
        timed_out = expire_gangs(group_id=group.pk, now=now)
        pending = list(
            Workload.objects.filter(state=WorkloadState.PENDING, quota__group_id=group.pk)
            .select_related("gang")
            .order_by("-priority", "submitted_at", "pk")[:limit]
        )
        if not pending:
            # An idle cycle keeps the worker warm: the snapshot and the group's capacity are ready
            # (cheap when they already are) for the burst that comes next.
            cached_group_cluster(group, shard.version)
            warm_capacity(group)
            Shard.objects.filter(pk=shard.pk).update(
                last_cycle_at=now,
                last_cycle_ms=(time.perf_counter() - t0) * 1000,
                last_cycle_placed=0,
            )
            return CycleReport(group.pk, timed_out_gangs=len(timed_out)), None
        by_id = {w.pk: w for w in pending}
        cluster, cached = cached_group_cluster(group, shard.version)
        admitter = Admitter.for_group(group)
        units = sorted(_units(pending), key=lambda u: _sort_key(admitter, u))
        refused: dict[int, Verdict] = {}
        admitted: list[_Unit] = []
        for unit in units:
            verdict = admitter.admit(unit.members)
            if verdict.allowed:
                admitted.append(unit)
            else:
                for m in unit.members:
                    refused[m.pk] = verdict
        requests = [workload_request(m) for u in admitted for m in u.members]
        gangs = [
            GangSpec(
                f"{u.head.gang.name}" if u.head.gang else str(u.head.gang_id),
                tuple(str(m.pk) for m in u.members),
                u.gang_need,
            )
            for u in admitted
            if u.gang_need > 0
        ]
        # The target workload of FGD/Tessera: the shard's recent and pending request shapes (stable
        # from one small cycle to the next, unlike the few requests of one cycle alone).
        typical = typical_pods([*cluster.recent, *requests])
        work = cluster.state.copy()
        plan = plan_in_place(work, requests, policy=policy, gangs=gangs, typical=typical)
        unplaced = {int(u.request_id): u for u in plan.unplaced}
        for u in admitted:
            if any(m.pk in unplaced for m in u.members):
                admitter.unadmit([m for m in u.members if m.pk in unplaced])
        placed_ids = _persist(cluster, plan.placements, by_id, now)
        claim = _reclaim(group, admitter, admitted, unplaced)

        # Everyone still waiting: a reason with numbers and a position in the shard's queue.
        changed: list[Workload] = []
        position = 0
        for u in units:
            for m in u.members:
                if m.pk in by_id and m.pk not in placed_ids:
                    position += 1
                    if m.pk in refused:
                        code, reason = refused[m.pk].code, refused[m.pk].reason
                    elif claim is not None and m.pk in claim[0]:
                        code, reason = "reclaiming", claim[1]
                    else:
                        un = unplaced[m.pk]
                        code, reason = un.reason.value, un.message
                    if (m.pending_code, m.pending_reason, m.queue_position) != (
                        code,
                        reason,
                        position,
                    ):
                        m.pending_code, m.pending_reason, m.queue_position = code, reason, position
                        changed.append(m)
        Workload.objects.bulk_update(
            changed, ["pending_code", "pending_reason", "queue_position"], batch_size=500
        )
        placed_set = set(placed_ids)
        refresh_gang_states({g for i in placed_set if (g := by_id[i].gang_id) is not None})
        took = (time.perf_counter() - t0) * 1000
        fresh = 0
        if placed_ids:
            fresh = Shard.objects.filter(pk=shard.pk, version=shard.version).update(
                version=shard.version + 1,
                last_cycle_at=now,
                last_cycle_ms=took,
                last_cycle_placed=len(placed_ids),
            )
        else:
            Shard.objects.filter(pk=shard.pk).update(
                last_cycle_at=now, last_cycle_ms=took, last_cycle_placed=0
            )
        if placed_ids:
            observers.notify_on_commit([(by_id[i].kind, i) for i in placed_ids])
            _materialize_on_commit(placed_ids)
    if placed_ids and fresh:
        # Keep the worker's snapshot warm: the planner's state is the committed one.
        cluster.state = work
        placed_requests = {str(i) for i in placed_ids}
        cluster.recent.extend(r for r in requests if r.request_id in placed_requests)
        for a in plan.placements:
            cluster.applied[int(a.request_id)] = a
        cluster.version = shard.version + 1
        remember(cluster)
    elif placed_ids:
        forget(group.pk)
    report = CycleReport(
        group_id=group.pk,
        considered=len(pending),
        admitted=sum(len(u.members) for u in admitted),
        placed=len(placed_ids),
        waiting=len(pending) - len(placed_ids),
        refused=len(refused),
        timed_out_gangs=len(timed_out),
        reclaimed=len(claim[2]) if claim else 0,
        snapshot_cached=cached,
        duration_ms=(time.perf_counter() - t0) * 1000,
        placed_ids=tuple(placed_ids),
    )
    return report, cluster


def _materialize_on_commit(workload_ids: Sequence[int]) -> None:
    ids = list(workload_ids)

    transaction.on_commit(lambda: followups().materialize(ids))


def run_cycle(group_id: int, *, limit: int | None = None, policy: str | None = None) -> CycleReport:
    """One scheduling cycle for a shard (quota group): see the module docstring. Idempotent: with nothing
    pending it only records that it ran; run twice (or twice at once) it never places a workload twice."""
    group = QuotaGroup.objects.filter(pk=group_id).first()
    if group is None:
        return CycleReport(group_id)
    ensure_shard(group.pk)
    limit = limit or int(getattr(settings, "TESSERA_CYCLE_MAX_WORKLOADS", 5000))
    policy = policy or settings.TESSERA_PLACEMENT_POLICY
    for attempt in range(2):
        try:
            report, _ = _run_once(group, limit=limit, policy=policy)
        except (StaleSnapshot, IntegrityError, OperationalError) as exc:
            if isinstance(exc, OperationalError) and not is_lock_conflict(exc):
                raise
            logger.warning(
                "cycle of group %s rolled back (%s); retrying on a fresh snapshot", group, exc
            )
            forget(group.pk)
            if attempt == 1:
                return CycleReport(group.pk, retried=True)
            continue
        if attempt:
            report = CycleReport(**{**report.__dict__, "retried": True})
        if report.considered:
            logger.info(
                "cycle %s: %d pending, %d admitted, %d placed, %d waiting in %.1f ms (snapshot %s)",
                group.name,
                report.considered,
                report.admitted,
                report.placed,
                report.waiting,
                report.duration_ms,
                "cached" if report.snapshot_cached else "rebuilt",
            )
        return report
    return CycleReport(group.pk, retried=True)
