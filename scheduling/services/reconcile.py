"""Reconcilers (run on beat): follow the cluster's view of workloads, fix drift between workload states
and placements, load the inventory. Each logs what it changed and returns a summary."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, OuterRef
from django.utils import timezone

from portal.periodic import ItemFailures, run_in_chunks
from portal.transactions import retry_transaction
from scheduling import observers
from scheduling.backends.base import (
    Backend,
    BackendError,
    GpuBinding,
    MaterializeRequest,
    ObservedPhase,
    StatusReport,
)
from scheduling.backends.base import WorkloadKind as BackendKind
from scheduling.backends.registry import get_backend
from scheduling.choices import ACTIVE_STATES, WorkloadKind, WorkloadState
from scheduling.followups import BackendRelease
from scheduling.inventory import SyncReport, sync_inventory_rows
from scheduling.lock_objects import lock_shards
from scheduling.models import Placement, PlacementGpu, Workload
from scheduling.services.mig_reconfig import placements_waiting_for_reconfiguration
from scheduling.services.snapshot import bump_shards_for_nodes
from scheduling.services.workloads import (
    backend_name,
    fail_workloads,
    refresh_gang_states,
    release_on_backend,
    release_workload,
    requeue_workloads,
)

logger = logging.getLogger(__name__)


def materialize_request(
    w: Workload, placement: Placement, shares: Sequence[PlacementGpu] | None = None
) -> MaterializeRequest:
    """What the backend needs to run a placed workload (deterministic name, node, GPU shares).
    `shares`: the placement's GPU shares with their GPUs, when the caller read them in bulk."""
    if shares is None:
        shares = list(placement.gpu_shares.select_related("gpu"))
    shares = sorted(shares, key=lambda s: s.gpu.index)
    gang = w.gang
    return MaterializeRequest(
        workload_id=w.pk,
        name=backend_name(w),
        kind=BackendKind.CODESPACE if w.kind == WorkloadKind.CODESPACE else BackendKind.JOB_POD,
        tenant_slug=w.tenant.slug,
        image=w.image,
        node_name=placement.node.name,
        cpu_milli=placement.cpu_milli,
        memory_mib=placement.memory_mib,
        gpus=tuple(
            GpuBinding(
                s.gpu.index,
                s.gpu.uuid,
                s.gpu_milli,
                s.gpu_memory_mib,
                mig_profile=s.mig_profile if s.mig_start is not None else "",
                mig_start=s.mig_start,
            )
            for s in shares
        ),
        gpu_model=placement.node.gpu_model,
        home_volume_gib=w.home_volume_gib,
        home_name=w.home_volume,
        gang_name=gang.name if gang else "",
        gang_min_available=gang.min_available if gang else 0,
        priority=w.priority,
        labels=(("tessera.io/workload", str(w.pk)), ("tessera.io/tenant", w.tenant.slug)),
        placement_id=placement.pk,
    )


def placement_is_active(placement_id: int) -> bool:
    """The placement is still open (not released by a release, requeue, failure or reclaim)."""
    return Placement.objects.filter(pk=placement_id, released_at__isnull=True).exists()


def _active_placements(placement_ids: Iterable[int]) -> set[int]:
    return set(
        Placement.objects.filter(pk__in=list(placement_ids), released_at__isnull=True).values_list(
            "pk", flat=True
        )
    )


def materialize_placement(
    w: Workload, placement: Placement, backend: Backend | None = None
) -> bool:
    """Make one placement real on the backend; False when the placement was released meanwhile and
    nothing of it is left on the cluster (`materialize_placements` of one; a BackendError is raised)."""
    made, errors = materialize_placements([(w, placement)], backend)
    if errors:
        raise errors[w.pk]
    return bool(made)


def materialize_placements(
    pairs: Sequence[tuple[Workload, Placement]], backend: Backend | None = None
) -> tuple[list[int], dict[int, BackendError]]:
    """Make placements real on the backend: (the workload ids whose objects now exist, the backend's
    error per workload it refused). A constant number of queries for any number of placements, and
    one backend call for all of them when the backend has `materialize_many` (the simulated one).

    The placements are checked just before the create (a release that already committed: nothing is
    created) and again after it (compare-and-set on `released_at`, no lock held across the cluster
    call): a release that commits after the first check either commits before the second one (we
    delete what we just made) or after it, and then its release task, sent on that commit, runs after
    our create and finds the object. Either way no object outlives its placement."""
    backend = backend or get_backend()
    ids = [p.pk for _, p in pairs]
    # a placement waiting for its card's MIG reconfiguration starts when it is ready (mig_reconfig)
    active = _active_placements(ids) - placements_waiting_for_reconfiguration(ids)
    pairs = [(w, p) for w, p in pairs if p.pk in active]
    if not pairs:
        return [], {}
    shares: dict[int, list[PlacementGpu]] = {p.pk: [] for _, p in pairs}
    for share in PlacementGpu.objects.filter(placement_id__in=list(shares)).select_related("gpu"):
        shares[share.placement_id].append(share)
    requests = [materialize_request(w, p, shares[p.pk]) for w, p in pairs]
    errors = _create(backend, requests)
    made = [r for r in requests if r.workload_id not in errors]
    still = _active_placements(r.placement_id for r in made if r.placement_id is not None)
    home = {w.pk: w.home_volume for w, _ in pairs}
    for r in made:
        if r.placement_id not in still:
            try:
                backend.release(
                    r.workload_id,
                    r.name,
                    delete_home=False,
                    home_name=home[r.workload_id],
                    placement_id=r.placement_id,
                )
            except BackendError as exc:
                errors[r.workload_id] = exc
                continue
            logger.info(
                "materialize: placement %s of %s released meanwhile, removed",
                r.placement_id,
                r.workload_id,
            )
    return [
        r.workload_id for r in made if r.placement_id in still and r.workload_id not in errors
    ], errors


def _create(backend: Backend, requests: Sequence[MaterializeRequest]) -> dict[int, BackendError]:
    """The backend call of `materialize_placements`: one batch when the backend has
    `materialize_many` and there is more than one, else one create per request."""
    many = getattr(backend, "materialize_many", None)
    if many is not None and len(requests) > 1:
        return dict(many(requests))
    errors: dict[int, BackendError] = {}
    for request in requests:
        try:
            backend.materialize(request)
        except BackendError as exc:
            errors[request.workload_id] = exc
    return errors


def release_objects(
    items: Sequence[BackendRelease], backend: Backend | None = None
) -> list[tuple[BackendRelease, BackendError]]:
    """Remove the cluster objects of these placements: one call when the backend has `release_many`
    and there is more than one, else one per item. Returns the items the backend refused, with why
    (the others are gone)."""
    backend = backend or get_backend()
    many = getattr(backend, "release_many", None)
    if many is not None and len(items) > 1:
        many(items)
        return []
    failed = []
    for item in items:
        try:
            backend.release(
                item.workload_id,
                item.name,
                delete_home=item.delete_home,
                home_name=item.home_name,
                placement_id=item.placement_id,
            )
        except BackendError as exc:
            failed.append((item, exc))
    return failed


def placed_with_placement(workload_ids: Iterable[int]) -> list[tuple[Workload, Placement]]:
    """The given workloads that are still PLACED, with their active placement."""
    out = []
    placements = {
        p.workload_id: p
        for p in Placement.objects.filter(
            workload_id__in=list(workload_ids), released_at__isnull=True
        ).select_related("node")
    }
    for w in Workload.objects.filter(
        pk__in=list(placements), state=WorkloadState.PLACED
    ).select_related("tenant", "gang"):
        out.append((w, placements[w.pk]))
    return out


@dataclass(frozen=True)
class StatusSummary:
    running: int = 0
    failed: int = 0
    succeeded: int = 0
    requeued: int = 0
    rematerialize: tuple[int, ...] = ()


def apply_status_reports(reports: Sequence[StatusReport]) -> StatusSummary:
    """Move workloads along what the cluster reports (compare-and-set, so a stale report changes nothing)."""
    now = timezone.now()
    record_allocations(reports)
    by_phase: dict[ObservedPhase, list[StatusReport]] = {}
    for r in reports:
        by_phase.setdefault(r.phase, []).append(r)
    running_ids = [r.workload_id for r in by_phase.get(ObservedPhase.RUNNING, [])]
    started = _mark_running(running_ids, now) if running_ids else []
    failed = 0
    for r in by_phase.get(ObservedPhase.FAILED, []):
        failed += len(fail_workloads([r.workload_id], reason=r.message or "The pod failed."))
    succeeded = 0
    for r in by_phase.get(ObservedPhase.SUCCEEDED, []):
        w = Workload.objects.filter(pk=r.workload_id).only("state").first()
        if w and w.state in ACTIVE_STATES:
            release_workload(
                r.workload_id,
                reason=r.message or "Completed.",
                state=WorkloadState.SUCCEEDED,
            )
            succeeded += 1
    requeued, remat = follow_missing(
        [r.workload_id for r in by_phase.get(ObservedPhase.MISSING, [])]
    )
    summary = StatusSummary(len(started), failed, succeeded, len(requeued), remat)
    if started or failed or succeeded or requeued:
        logger.info("status sync: %s", summary)
    return summary


def record_allocations(reports: Sequence[StatusReport]) -> int:
    """Write the devices the cluster allocated (dra mode) on the active placement's GPU shares, by GPU
    index; returns the shares changed. A released placement keeps what it had."""
    changed = 0
    for r in reports:
        for index, device in r.allocated_devices:
            changed += (
                PlacementGpu.objects.filter(
                    placement__workload_id=r.workload_id,
                    placement__released_at__isnull=True,
                    gpu__index=index,
                )
                .exclude(allocated_device=device[:320])
                .update(allocated_device=device[:320])
            )
    return changed


@retry_transaction
def _mark_running(workload_ids: Sequence[int], now: Any) -> list[Workload]:
    """PLACED → RUNNING for the workloads the cluster reports running; returns those moved.

    Locks in the global order (docs/adr/0002): the shards' advisory locks, then the workload rows in
    pk order, and only then the gangs' rows (refresh_gang_states). Without the shard lock this
    deadlocked with a job cancel, which holds the gang row and then writes its members' rows."""
    groups = set(
        Workload.objects.filter(pk__in=workload_ids)
        .values_list("quota__group_id", flat=True)
        .distinct()
    )
    lock_shards(groups)
    started = list(
        Workload.objects.select_for_update()
        .filter(pk__in=workload_ids, state=WorkloadState.PLACED)
        .order_by("pk")
    )
    Workload.objects.filter(pk__in=[w.pk for w in started], state=WorkloadState.PLACED).update(
        state=WorkloadState.RUNNING, started_at=now, updated_at=now
    )
    refresh_gang_states({w.gang_id for w in started if w.gang_id})
    observers.notify_on_commit([(w.kind, w.pk) for w in started])
    return started


def follow_missing(workload_ids: Sequence[int]) -> tuple[list[int], tuple[int, ...]]:
    """Active workloads the cluster has no object for: a RUNNING one lost its pod and is requeued; a
    PLACED one is to be materialized again (returned, the caller sends the task). Returns (requeued,
    to rematerialize)."""
    states = dict(Workload.objects.filter(pk__in=list(workload_ids)).values_list("pk", "state"))
    gone = [wid for wid in workload_ids if states.get(wid) == WorkloadState.RUNNING]
    requeued = requeue_workloads(
        gone, reason="Requeued: its pod disappeared from the cluster.", code="pod_missing"
    )
    remat = tuple(wid for wid in workload_ids if states.get(wid) == WorkloadState.PLACED)
    return requeued, remat


def sync_status(batch: int = 500, failures: ItemFailures | None = None) -> StatusSummary:
    """Ask the backend about every PLACED/RUNNING workload and apply what it says: one backend call
    and one set-based apply per `batch` workloads; a report whose apply raises is logged and counted
    in `failures` (portal.periodic.run_in_chunks) and the others are applied."""
    backend = get_backend()
    ids = list(
        Workload.objects.filter(state__in=ACTIVE_STATES).order_by("pk").values_list("pk", flat=True)
    )
    summaries: list[StatusSummary] = []
    for i in range(0, len(ids), batch):
        reports = list(backend.sync_status(ids[i : i + batch]))
        run_in_chunks(
            reports,
            lambda rows: summaries.append(apply_status_reports(rows)),
            task="status sync",
            kind="workload",
            key=lambda r: r.workload_id,
            chunk=batch,
            failures=failures,
            # its steps lock and commit on their own (compare-and-set): one chunk-wide transaction
            # would hold the shard locks of every step until the last one
            transactional=False,
        )
    return StatusSummary(
        sum(s.running for s in summaries),
        sum(s.failed for s in summaries),
        sum(s.succeeded for s in summaries),
        sum(s.requeued for s in summaries),
        tuple(w for s in summaries for w in s.rematerialize),
    )


@dataclass(frozen=True)
class DriftReport:
    """What `reconcile_placements` corrected."""

    active_without_placement: tuple[int, ...] = ()
    placements_of_inactive: tuple[int, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.active_without_placement or self.placements_of_inactive)


def reconcile_placements(failures: ItemFailures | None = None) -> DriftReport:
    """Quota use is computed from PLACED/RUNNING workloads, capacity from active placements: make the two
    agree. An active workload without a placement is requeued; an open placement of a workload that is
    not active is closed (and the backend told). Both are set-based, in chunks; a row whose fix
    raises is logged and counted in `failures` and the others are fixed (run_in_chunks). Logs every
    correction."""
    open_placement = Placement.objects.filter(workload=OuterRef("pk"), released_at__isnull=True)
    orphans = list(
        Workload.objects.filter(state__in=ACTIVE_STATES)
        .annotate(has=Exists(open_placement))
        .filter(has=False)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    requeued: list[int] = []
    run_in_chunks(
        orphans,
        lambda ids: requeued.extend(
            requeue_workloads(
                ids, reason="Requeued: it had no placement (reconciled).", code="reconciled"
            )
        ),
        task="reconcile",
        kind="workload",
        failures=failures,
    )
    stale = list(
        Placement.objects.filter(released_at__isnull=True)
        .exclude(workload__state__in=ACTIVE_STATES)
        .order_by("pk")
        .values_list("pk", "workload_id", "node_id")
    )
    closed: list[int] = []

    def close(rows: Sequence[tuple[int, int, int]]) -> None:
        closing = list(
            Placement.objects.select_for_update()
            .filter(pk__in=[p for p, _, _ in rows], released_at__isnull=True)
            .order_by("pk")
            .values_list("pk", "workload_id")
        )
        Placement.objects.filter(pk__in=[p for p, _ in closing]).update(released_at=timezone.now())
        bump_shards_for_nodes({n for _, _, n in rows})
        # the backend is told, as every service that closes a placement does: without it the pod
        # ran on until the orphan reconciler's next pass (an orphaned pod in the audit)
        workloads = Workload.objects.in_bulk([w for _, w in closing])
        release_on_backend([(workloads[w], p) for p, w in closing if w in workloads])
        closed.extend(w for _, w in closing)

    run_in_chunks(
        stale, close, task="reconcile", kind="placement", key=lambda row: row[0], failures=failures
    )
    report = DriftReport(tuple(dict.fromkeys(requeued)), tuple(dict.fromkeys(closed)))
    if report.changed:
        logger.warning(
            "reconcile: requeued active workloads without placement %s; closed placements of "
            "inactive workloads %s",
            list(report.active_without_placement),
            list(report.placements_of_inactive),
        )
    return report


@dataclass(frozen=True)
class OrphanReport:
    """What `reconcile_backend_orphans` corrected."""

    removed: tuple[str, ...] = ()  # names of cluster objects without an active placement
    rematerialized: tuple[int, ...] = ()  # PLACED workloads without an object
    requeued: tuple[int, ...] = ()  # RUNNING workloads without an object


def reconcile_backend_orphans() -> OrphanReport:
    """Make the cluster's objects and the active placements agree, on every backend.

    An object whose placement is no longer active (released, failed, requeued, or never known: its
    release was lost, or materialize raced a release) is deleted with its Service (a home volume is
    never touched); an object made before placements were recorded on objects is matched by workload.
    An active placement made before the listing with no object is followed like a MISSING status
    report: materialized again when PLACED, requeued when RUNNING. The cluster is listed *before*
    the placements are read, so an object made after a placement we have not read yet cannot be
    taken for an orphan. Logs every fix."""
    backend = get_backend()
    listed_at = timezone.now()
    objects = backend.list_objects()
    active = dict(
        Placement.objects.filter(
            released_at__isnull=True, workload__state__in=ACTIVE_STATES
        ).values_list("pk", "workload_id")
    )
    active_workloads = set(active.values())
    removed = []
    for obj in objects:
        owned = (
            obj.placement_id in active
            if obj.placement_id is not None
            else obj.workload_id in active_workloads
        )
        if owned:
            continue
        try:
            backend.release(
                obj.workload_id, obj.name, delete_home=False, placement_id=obj.placement_id
            )
        except BackendError as exc:  # one object the cluster refuses must not stop the others
            logger.error("reconcile: could not delete %s: %s", obj.name, exc.message)
            continue
        removed.append(obj.name)
        logger.warning(
            "reconcile: deleted %s of workload %s (placement %s is not active)",
            obj.name,
            obj.workload_id,
            obj.placement_id,
        )
    made = {obj.placement_id for obj in objects}
    made_for = {obj.workload_id for obj in objects if obj.placement_id is None}
    missing = sorted(
        workload_id
        for workload_id in Placement.objects.filter(
            pk__in=[pk for pk, wid in active.items() if pk not in made and wid not in made_for],
            released_at__isnull=True,
            created_at__lt=listed_at,
        ).values_list("workload_id", flat=True)
    )
    requeued, remat = follow_missing(missing)
    if missing:
        logger.warning(
            "reconcile: active workloads without a cluster object: rematerialize %s, requeued %s",
            list(remat),
            requeued,
        )
    return OrphanReport(tuple(removed), remat, tuple(requeued))


def sync_inventory(failures: ItemFailures | None = None) -> SyncReport:
    """Upsert nodes and GPUs from the backend's inventory, set-based in chunks of nodes; a node whose
    upsert raises is logged and counted in `failures` (by name) and the others are upserted."""
    reports: list[SyncReport] = []
    run_in_chunks(
        list(get_backend().sync_inventory()),
        lambda nodes: reports.append(sync_inventory_rows(nodes)),
        task="inventory sync",
        kind="node",
        key=lambda node: node.name,
        failures=failures,
    )
    return SyncReport(
        sum(r.created_nodes for r in reports),
        sum(r.updated_nodes for r in reports),
        sum(r.created_gpus for r in reports),
        sum(r.updated_gpus for r in reports),
    )
