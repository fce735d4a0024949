"""One scheduling cycle of a shard (a quota group): read → decide → apply, in one transaction.

lock the shard → time out expired gangs → **read** the cycle's input (PENDING workloads by priority and
age, the group's quota snapshot, the worker's cached engine state) → **decide** (`scheduling.services.
decide`: pure, no database: admit through one `quotas.admission.AdmissionSession`, plan with the engine,
choose a reclaim, a reason and a queue position for everything left waiting) → **apply** the decision
(bulk inserts, compare-and-set PENDING→PLACED, capacity re-checked against the database under node row
locks, reclaim victims stopped or requeued, waiting reasons written, the shard version bumped) → after
commit: materialize on the backend, tell observers, update the cached snapshot.

Two cycles of one shard serialize on its advisory lock; two shards that share a node (overlapping
selectors) or a stale snapshot are caught by the database re-check, which rolls the cycle back and
retries it once on a fresh snapshot; the unique constraint `one_active_placement_per_workload` makes a
double placement impossible whatever happens. An IntegrityError that the retry meets again is not a race
but a fault: it is raised (the task fails, visibly), not swallowed.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Count, Sum
from django.utils import timezone

from core.placement import GPU_MILLI, Assignment, ClusterState
from portal.transactions import is_lock_conflict
from quotas.models import QuotaGroup
from quotas.usage import usage_of
from scheduling import observers
from scheduling.choices import ACTIVE_STATES, WorkloadState
from scheduling.followups import followups
from scheduling.lock_objects import lock_nodes, lock_shard
from scheduling.models import Gpu, Placement, PlacementGpu, Shard, Workload
from scheduling.services.charge import mark_placed_whole_cards, warm_cards
from scheduling.services.decide import (
    CycleDecision,
    CycleInput,
    PendingWorkload,
    Reclaim,
    conclude,
    propose,
)
from scheduling.services.feasibility import warm_pool
from scheduling.services.heap import note_busy, settle_after_burst
from scheduling.services.mig_cards import MigPool, mig_pool, record_mig_slots
from scheduling.services.mig_reconfig import record_relayouts
from scheduling.services.polite_reclaim import reclaim_politely
from scheduling.services.pool_cache import one_inventory_reading
from scheduling.services.quota_bridge import (
    ReclaimRows,
    cycle_snapshot,
    reclaim_snapshot,
    warm_capacity,
)
from scheduling.services.snapshot import (
    GroupCluster,
    bump_shards_for_nodes,
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
    requeue_each,
    trigger_cycle,
)
from scheduling.topology import gang_topology, pool_levels

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
    now: datetime,
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
    cluster: GroupCluster,
    assignments: Sequence[Assignment],
    by_id: dict[int, Workload],
    now: datetime,
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
                # mig_profile has no database default: '' here, the MIG instance is written after
                # (scheduling.services.mig_cards.record_mig_slots)
                f"INSERT INTO {g_table} (placement_id, gpu_id, gpu_milli, gpu_memory_mib, mig_profile) "
                "SELECT u.*, '' FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[]) "
                "AS u(p, g, c, m)",
                list(cols),
            )


@dataclass
class _CycleRead:
    """What a cycle read from the database: the pure input of `decide`, and the rows and maps to apply
    its decision with."""

    input: CycleInput
    rows: dict[int, Workload]
    cluster: GroupCluster
    snapshot_cached: bool


def _read(group: QuotaGroup, shard: Shard, *, limit: int, policy: str) -> _CycleRead | None:
    """The cycle's input: up to `limit` PENDING workloads (priority, age), their gangs' active members,
    the group's quota snapshot (summed) and the worker's cached engine state. None when nothing waits."""
    pending = list(
        Workload.objects.filter(state=WorkloadState.PENDING, quota__group_id=group.pk)
        .select_related("gang")
        .order_by("-priority", "submitted_at", "pk")[:limit]
    )
    if not pending:
        return None
    gang_ids = {w.gang_id for w in pending if w.gang_id}
    gang_active: dict[int, int] = {}
    if gang_ids:
        gang_active = dict(
            Workload.objects.filter(gang_id__in=gang_ids, state__in=ACTIVE_STATES)
            .values("gang_id")
            .annotate(n=Count("pk"))
            .values_list("gang_id", "n")
        )
    cluster, cached = cached_group_cluster(group, shard.version)
    mig = mig_pool(group, cluster.nodes) if any(w.mig_profile for w in pending) else MigPool()
    cycle_input = CycleInput(
        pending=tuple(
            PendingWorkload(
                usage=usage_of(w),
                request=workload_request(w),
                submitted_at=w.submitted_at,
                gang_min_available=w.gang.min_available if w.gang is not None else 0,
                mig_profile=w.mig_profile,
                gang_topology=gang_topology(w.gang),
            )
            for w in pending
        ),
        topology_levels=(
            pool_levels(shard.topology_levels)
            if any(w.gang is not None and w.gang.topology_level for w in pending)
            else ()
        ),
        quota=cycle_snapshot(group, shard.version),
        cluster=cluster.state,
        policy=policy,
        recent=tuple(cluster.recent),
        gang_active=gang_active,
        protect_started_after=(
            timezone.now() - timedelta(seconds=group.min_runtime_seconds)
            if group.min_runtime_seconds
            else None
        ),
        mig_cards=mig.cards,
        mig_relayout_cards=mig.relayout_cards,
        running=dict(cluster.applied),
    )
    return _CycleRead(cycle_input, {w.pk: w for w in pending}, cluster, cached)


def _decide(group: QuotaGroup, read: _CycleRead, version: int) -> CycleDecision:
    """`decide` on the cycle's input, reading the group's workloads for reclaim only when an admitted
    unit found no capacity: the running ones summed, and one by one on the nodes reclaim looks at."""
    proposal = propose(read.input)
    workloads = reclaim_snapshot(group, version) if proposal.reclaim_candidates else None
    return conclude(
        proposal,
        workloads,
        protect_started_after=read.input.protect_started_after,
        rows=ReclaimRows(group, version),
    )


def _stop_victims(group: QuotaGroup, claim: Reclaim) -> list[int]:
    """Execute a reclaim: job pods are requeued, codespaces released (their observer stops them; homes
    are kept). Returns the ids of the victims that were still active."""
    kinds = dict(
        Workload.objects.filter(pk__in=claim.victim_ids, state__in=ACTIVE_STATES).values_list(
            "pk", "kind"
        )
    )
    reasons = {i: v.reason for v in claim.victims for i in v.workload_ids}
    stopped = set()
    for wid in sorted(kinds):
        if kinds[wid] == "codespace":
            release_workload(wid, reason=f"Reclaimed: {reasons[wid]}")
            stopped.add(wid)
    # every job victim of the claim requeued at once: one transaction, one cycle triggered
    moved = requeue_each(
        {
            i: f"Reclaimed: {victim.reason}"
            for victim in claim.victims
            for i in victim.workload_ids
            if kinds.get(i, "codespace") != "codespace"
        },
        code="reclaimed",
    )
    logger.info("cycle %s: reclaim for %s: %s", group, list(claim.claimant_ids), claim.message)
    # with the gang mates a requeue takes along
    return sorted(stopped.union(moved))


def _record_waiting(rows: dict[int, Workload], decision: CycleDecision) -> None:
    """Write the code, reason and queue position of everything left waiting (only what changed)."""
    changed: list[Workload] = []
    for wid, waiting in decision.waiting.items():
        row = rows[wid]
        wanted = (waiting.code, waiting.reason, waiting.position)
        if (row.pending_code, row.pending_reason, row.queue_position) != wanted:
            row.pending_code, row.pending_reason, row.queue_position = wanted
            changed.append(row)
    Workload.objects.bulk_update(
        changed, ["pending_code", "pending_reason", "queue_position"], batch_size=500
    )


@dataclass(frozen=True)
class _Applied:
    """What a cycle wrote: the workloads placed, those reclaimed (stopped), and whether the decision's
    state is the shard's committed one at `version` (no other writer moved the shard meanwhile)."""

    placed_ids: list[int]
    reclaimed: list[int]
    fresh: bool
    version: int
    decision: CycleDecision


def _hold_version(shard: Shard) -> bool:
    """Lock the shard's row before this cycle's reclaim bumps its version (the stops release
    placements): from here every bump is this cycle's own. True when no other writer bumped it since
    the cycle read it (the cycle's snapshot can then follow its own changes)."""
    held = Shard.objects.select_for_update().filter(pk=shard.pk).values_list("version", flat=True)
    return held.first() == shard.version


def _release_stopped(
    state: ClusterState, running: Mapping[int, Assignment], ids: Sequence[int]
) -> bool:
    """Release the reclaimed workloads' placements from the cycle's state; False when one of them is
    not on it (the state is then no longer the database's)."""
    held = [running[wid] for wid in ids if wid in running]
    state.release_many(held)
    return len(held) == len(ids)


def _with_claimant(read: _CycleRead, decision: CycleDecision) -> CycleDecision:
    """The decision with the reclaim's claimant placed where the decide step planned it (on the state
    with exactly the stopped victims released): the claimant leaves the queue in the cycle that
    reclaimed for it instead of waiting for the next one."""
    claim = decision.reclaim
    assert claim is not None
    for a in claim.placements:
        decision.state.apply(a)
    placed = {int(a.request_id) for a in claim.placements}
    requests = {m.workload_id: m.request for m in read.input.pending}
    left = sorted(
        ((wid, w) for wid, w in decision.waiting.items() if wid not in placed),
        key=lambda item: item[1].position,
    )
    return replace(
        decision,
        placements=(*decision.placements, *claim.placements),
        waiting={wid: replace(w, position=n) for n, (wid, w) in enumerate(left, start=1)},
        placed_requests=(*decision.placed_requests, *(requests[i] for i in sorted(placed))),
    )


def _apply(
    group: QuotaGroup,
    shard: Shard,
    read: _CycleRead,
    decision: CycleDecision,
    *,
    now: datetime,
    started: float,
) -> _Applied:
    """Apply a decision inside the cycle's transaction: placements (re-checked against the database,
    StaleSnapshot when they no longer fit), the reclaim, the waiting reasons, gang states, the shard's
    version and stats; materialization and observers on commit."""
    placed_ids = _persist(read.cluster, decision.placements, read.rows, now)
    record_mig_slots(decision.mig)
    # Workloads on instances a planned MIG reconfiguration creates wait for it (mig_reconfig).
    waiting_for_mig = record_relayouts(read.cluster, decision.mig_relayouts, decision.mig, now=now)
    claim = decision.reclaim
    own_bumps = claim is not None and _hold_version(shard)
    # Polite reclaim (scheduling.services.polite_reclaim): notices and countdowns; 0 s = at once.
    polite = reclaim_politely(group, claim, decision.waiting, now=now, stop=_stop_victims)
    reclaimed = polite.reclaimed
    if polite.waiting:
        decision = replace(decision, waiting={**decision.waiting, **polite.waiting})
    exact = _release_stopped(decision.state, read.input.running, reclaimed)
    if claim is not None and claim.placements and set(claim.victim_ids) <= set(reclaimed):
        # every victim stopped now (no notice to wait for): the claimant starts in this cycle
        decision = _with_claimant(read, decision)
        placed_ids += _persist(read.cluster, claim.placements, read.rows, now)
    _record_waiting(read.rows, decision)
    refresh_gang_states({g for i in placed_ids if (g := read.rows[i].gang_id) is not None})
    took = (time.perf_counter() - started) * 1000
    version = shard.version
    if own_bumps:
        # the shard's row is held: every bump since was this cycle's stops
        version = Shard.objects.values_list("version", flat=True).get(pk=shard.pk)
    fresh = exact and own_bumps if reclaimed else True
    if placed_ids:
        fresh = fresh and bool(
            Shard.objects.filter(pk=shard.pk, version=version).update(
                version=version + 1,
                last_cycle_at=now,
                last_cycle_ms=took,
                last_cycle_placed=len(placed_ids),
            )
        )
        version += 1
        observers.notify_on_commit([(read.rows[i].kind, i) for i in placed_ids])
        _materialize_on_commit([i for i in placed_ids if i not in waiting_for_mig])
    else:
        Shard.objects.filter(pk=shard.pk).update(
            last_cycle_at=now, last_cycle_ms=took, last_cycle_placed=0
        )
    return _Applied(placed_ids, reclaimed, fresh, version, decision)


def _keep_warm(read: _CycleRead, applied: _Applied) -> None:
    """After commit: the worker's cached snapshot becomes the committed one, with this cycle's
    placements and the placements its reclaim stopped released (or is dropped when another writer
    moved the shard's version meanwhile)."""
    if not applied.placed_ids and not applied.reclaimed:
        return
    if not applied.fresh:
        forget(read.cluster.group_id)
        return
    decision = applied.decision
    cluster = read.cluster
    cluster.state = decision.state
    cluster.recent.extend(decision.placed_requests)
    for wid in applied.reclaimed:
        cluster.applied.pop(wid, None)
    for a in decision.placements:
        cluster.applied[int(a.request_id)] = a
    cluster.version = applied.version
    remember(cluster)


class _WarmOnCommit:
    """`_keep_warm` once, as the cycle's transaction commits: registered first, it runs before the
    follow-ups the cycle triggered on commit (one may be a cycle of this shard in this process: an
    eager run, or the next task of a single-process shard worker), so they find the snapshot warm.
    Called again after the block, it is a no-op; inside an outer transaction (no commit yet) that
    call is the one that does it."""

    def __init__(self) -> None:
        self.args: tuple[_CycleRead, _Applied] | None = None
        self.done = False

    def __call__(self) -> None:
        if self.args is not None and not self.done:
            self.done = True
            _keep_warm(*self.args)


def _run_once(group: QuotaGroup, *, limit: int, policy: str) -> CycleReport:
    started = time.perf_counter()
    warm = _WarmOnCommit()
    with transaction.atomic():
        transaction.on_commit(warm)
        lock_shard(group.pk)
        # The clock is read once the lock is held: another cycle of the shard may have kept us
        # waiting, and deadlines, placed_at and last_cycle_at must be the time this cycle acted at.
        now = timezone.now()
        shard = Shard.objects.get(group_id=group.pk)
        timed_out = expire_gangs(group_id=group.pk, now=now)
        read = _read(group, shard, limit=limit, policy=policy)
        if read is None:
            # An idle cycle keeps the worker warm: the snapshot, the group's capacity and the pool
            # readings of submissions are ready (cheap when they already are) for the next burst.
            cached_group_cluster(group, shard.version)
            warm_capacity(group)
            warm_pool(group)
            warm_cards(group)
            settle_after_burst()
            # Nothing waits: no reclaim is needed, live notices are cancelled.
            reclaim_politely(group, None, {}, now=now, stop=_stop_victims)
            Shard.objects.filter(pk=shard.pk).update(
                last_cycle_at=now,
                last_cycle_ms=(time.perf_counter() - started) * 1000,
                last_cycle_placed=0,
            )
            return CycleReport(group.pk, timed_out_gangs=len(timed_out))
        note_busy()
        decision = _decide(group, read, shard.version)
        applied = _apply(group, shard, read, decision, now=now, started=started)
        if applied.placed_ids and len(read.input.pending) >= limit:
            # The cycle read a full batch and made progress: more may wait behind it. The next
            # cycle runs as soon as this one commits instead of at the next beat.
            trigger_cycle(group.pk)
        warm.args = (read, applied)
    warm()
    considered = len(read.input.pending)
    return CycleReport(
        group_id=group.pk,
        considered=considered,
        admitted=applied.decision.admitted,
        placed=len(applied.placed_ids),
        waiting=considered - len(applied.placed_ids),
        refused=applied.decision.refused,
        timed_out_gangs=len(timed_out),
        reclaimed=len(applied.reclaimed),
        snapshot_cached=read.snapshot_cached,
        duration_ms=(time.perf_counter() - started) * 1000,
        placed_ids=tuple(applied.placed_ids),
    )


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
            with one_inventory_reading():
                report = _run_once(group, limit=limit, policy=policy)
        except (StaleSnapshot, IntegrityError, OperationalError) as exc:
            if isinstance(exc, OperationalError) and not is_lock_conflict(exc):
                raise
            forget(group.pk)
            if attempt == 1 and isinstance(exc, IntegrityError):
                # The retry ran on a fresh snapshot and met the constraint again: not a race.
                logger.error("cycle of group %s rolled back twice on %s", group, exc)
                raise
            logger.warning(
                "cycle of group %s rolled back (%s); retrying on a fresh snapshot", group, exc
            )
            if attempt == 1:
                return CycleReport(group.pk, retried=True)
            continue
        if attempt:
            report = replace(report, retried=True)
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


def commit_assignments(
    cluster: GroupCluster,
    assignments: Sequence[Assignment],
    rows: dict[int, Workload],
    now: datetime,
) -> list[int]:
    """Write placements decided outside a cycle (a defragmentation plan) the way a cycle writes its own:
    PENDING→PLACED compare-and-set, capacity re-checked under node row locks (StaleSnapshot when they no
    longer fit), whole cards charged the card they got, gang states, the shards' versions bumped;
    observers and materialization on commit. The caller holds the shard lock, inside its transaction."""
    placed_ids = _persist(cluster, assignments, rows, now)
    refresh_gang_states({g for i in placed_ids if (g := rows[i].gang_id) is not None})
    bump_shards_for_nodes({cluster.nodes[a.node].pk for a in assignments})
    observers.notify_on_commit([(rows[i].kind, i) for i in placed_ids])
    _materialize_on_commit(placed_ids)
    return placed_ids
