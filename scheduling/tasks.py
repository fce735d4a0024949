"""Celery tasks of the scheduling service. Every task takes ids, re-reads, returns early when there is
nothing to do, and is safe to run twice; only transient backend errors are retried."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from celery import shared_task

from portal.celery import SWEEP_HEADER
from portal.periodic import ItemFailures
from quotas.models import QuotaGroup
from scheduling.backends.base import BackendError
from scheduling.backends.registry import get_backend
from scheduling.followups import BackendRelease
from scheduling.queues import queue_for_group
from scheduling.services import audit, defrag, reconcile
from scheduling.services.cycle import run_cycle
from scheduling.services.mig_reconfig import drive_reconfigurations
from scheduling.services.polite_reclaim import deliver_reclaim_notice
from scheduling.services.workloads import (
    clear_cycle_queued,
    expire_gangs,
    fail_workloads,
)

logger = logging.getLogger(__name__)

MATERIALIZE_BATCH = 200
RELEASE_BATCH = 500


@shared_task(acks_late=True)
def run_cycle_task(group_id: int) -> dict[str, Any]:
    """One scheduling cycle of a shard (routed to the shard's queue). Idempotent."""
    clear_cycle_queued(group_id)
    report = run_cycle(group_id)
    return {
        "group_id": report.group_id,
        "considered": report.considered,
        "placed": report.placed,
        "waiting": report.waiting,
        "duration_ms": round(report.duration_ms, 1),
    }


def send_cycle(group_id: int) -> None:
    """Queue one cycle of the shard on its queue, as a sweep (portal.periodic `claim_sweep`): a cycle
    reads the shard's whole current state, so one that starts after a copy was sent covers it, and a
    worker that comes back to hundreds of queued triggers (every submit, release and beat tick sends
    one; without REDIS_URL none is deduplicated) runs one cycle and skips the rest with one UPDATE
    each, instead of running every copy (a killed scheduling worker's queue took up to 14.9 s and
    more to drain, issue 38)."""
    run_cycle_task.apply_async(
        (group_id,), queue=queue_for_group(group_id), headers={SWEEP_HEADER: f"cycle:{group_id}"}
    )


@shared_task
def schedule_cycles_task() -> int:
    """Beat: queue one cycle per shard on its queue (cycles also run on every submit/release)."""
    ids = list(QuotaGroup.objects.values_list("pk", flat=True))
    for gid in ids:
        send_cycle(gid)
    return len(ids)


@shared_task(bind=True, acks_late=True, max_retries=5)
def materialize_workloads_task(self: Any, workload_ids: Sequence[int]) -> int:
    """Make placed workloads real on the backend (create-or-get by deterministic name). A permanent
    backend error fails the workload with the message; a transient one is retried with backoff."""
    backend = get_backend()
    retry: list[int] = []
    last: BackendError | None = None
    made, errors = reconcile.materialize_placements(
        reconcile.placed_with_placement(workload_ids), backend
    )
    done = len(made)
    for workload_id, exc in sorted(errors.items()):
        if exc.permanent:
            fail_workloads([workload_id], reason=f"The cluster refused it: {exc.message}")
        else:
            retry.append(workload_id)
            last = exc
    if retry:
        logger.warning("materialize: transient error for %s: %s", retry, last)
        raise self.retry(
            args=(retry,), exc=last, countdown=min(60, 2 ** (self.request.retries + 1))
        )
    return done


@shared_task(bind=True, acks_late=True, max_retries=5)
def release_backend_task(
    self: Any,
    workload_id: int,
    name: str,
    delete_home: bool = False,
    home_name: str = "",
    placement_id: int | None = None,
) -> None:
    """Remove the cluster objects of one placement of a workload (a message sent before releases
    were batched): `release_backend_objects_task` of one, retried as it was sent."""
    item = BackendRelease(workload_id, name, delete_home, home_name, placement_id)
    retry = _release_logging_refusals([item])
    if retry:
        raise self.retry(exc=retry[0][1], countdown=min(60, 2 ** (self.request.retries + 1)))


@shared_task(bind=True, acks_late=True, max_retries=5)
def release_backend_objects_task(self: Any, items: Sequence[Sequence[Any]]) -> int:
    """Remove the cluster objects of these placements (missing is fine; objects of a later placement
    of the same workload stay; `placement_id` None: whatever the workload has), in one backend call
    when the backend has `release_many`. A permanent refusal is logged; the items a transient error
    hit are retried with backoff. Returns how many were removed."""
    releases = [BackendRelease(*item) for item in items]
    retry = _release_logging_refusals(releases)
    if retry:
        logger.warning(
            "release: transient error for %s: %s", [r.workload_id for r, _ in retry], retry[0][1]
        )
        raise self.retry(
            args=([list(r) for r, _ in retry],),
            exc=retry[0][1],
            countdown=min(60, 2 ** (self.request.retries + 1)),
        )
    return len(releases)


def _release_logging_refusals(
    items: Sequence[BackendRelease],
) -> list[tuple[BackendRelease, BackendError]]:
    """Release through the backend; logs the permanent refusals, returns the transient failures."""
    retry = []
    for item, exc in reconcile.release_objects(items, get_backend()):
        if exc.permanent:
            logger.error("release of %s (%s) refused: %s", item.workload_id, item.name, exc.message)
        else:
            retry.append((item, exc))
    return retry


@shared_task(bind=True, max_retries=3)
def sync_status_task(self: Any) -> dict[str, Any]:
    """Beat: follow what the cluster says about placed/running workloads (the simulated cluster marks them
    running after TESSERA_SIM_START_DELAY_SECONDS). A workload whose report raises is logged and
    counted (`failed_reports`, `failed_ids`); the others are applied (docs/adr/0004)."""
    failures = ItemFailures()
    try:
        summary = reconcile.sync_status(failures=failures)
    except BackendError as exc:
        if exc.permanent:
            raise
        raise self.retry(exc=exc, countdown=5) from exc
    if summary.rematerialize:
        materialize_workloads_task.delay(list(summary.rematerialize))
    return {
        "running": summary.running,
        "failed": summary.failed,
        "succeeded": summary.succeeded,
        "requeued": summary.requeued,
        "failed_reports": failures.failed,
        "failed_ids": failures.failed_ids,
    }


@shared_task
def reconcile_task() -> dict[str, Any]:
    """Beat: time out gangs past their deadline and fix drift between workload states and placements.
    A gang whose timeout raises is logged and counted (`gangs_failed`); the others still time out.
    Likewise a workload or placement whose drift fix raises (`drift_failed`, `drift_failed_ids`)."""
    failures = ItemFailures()
    timed_out = expire_gangs(failures=failures)
    drift_failures = ItemFailures()
    drift = reconcile.reconcile_placements(failures=drift_failures)
    return {
        "gangs_timed_out": len(timed_out),
        "gangs_failed": failures.failed,
        "gangs_failed_ids": failures.failed_ids,
        "requeued": len(drift.active_without_placement),
        "closed_placements": len(drift.placements_of_inactive),
        "drift_failed": drift_failures.failed,
        "drift_failed_ids": drift_failures.failed_ids,
    }


@shared_task(bind=True, max_retries=3)
def reconcile_backend_orphans_task(self: Any) -> dict[str, int]:
    """Beat: make the cluster's objects match the active placements, on every backend: objects with
    no active placement are deleted, active placements without an object are materialized again
    (PLACED) or requeued (RUNNING). Each fix is logged. Transient errors are retried."""
    try:
        report = reconcile.reconcile_backend_orphans()
    except BackendError as exc:
        if exc.permanent:
            raise
        raise self.retry(exc=exc, countdown=30) from exc
    if report.rematerialized:
        materialize_workloads_task.delay(list(report.rematerialized))
    return {
        "deleted_orphans": len(report.removed),
        "rematerialized": len(report.rematerialized),
        "requeued": len(report.requeued),
    }


@shared_task
def drive_mig_reconfigurations_task() -> dict[str, int]:
    """Beat: move every dynamic MIG reconfiguration one step (planned → applying → ready | failed,
    timeouts included); a row whose step fails is logged and retried on the next beat."""
    report = drive_reconfigurations()
    return {
        "applying": len(report.applying),
        "ready": len(report.ready),
        "failed": len(report.failed),
        "errors": len(report.errors),
    }


@shared_task(bind=True, max_retries=3)
def sync_inventory_task(self: Any) -> dict[str, Any]:
    """Beat: upsert nodes and GPUs from the backend's inventory. A node whose upsert raises is logged
    and counted (`failed_nodes`, `failed_ids`: node names); the others are upserted."""
    failures = ItemFailures()
    try:
        report = reconcile.sync_inventory(failures=failures)
    except BackendError as exc:
        if exc.permanent:
            raise
        raise self.retry(exc=exc, countdown=30) from exc
    return {
        "created_nodes": report.created_nodes,
        "updated_nodes": report.updated_nodes,
        "failed_nodes": failures.failed,
        "failed_ids": failures.failed_ids,
    }


@shared_task
def audit_invariants_task() -> dict[str, int]:
    """Beat: run the invariant auditor and store the run for the operators' page and `/metrics`.
    Read-only apart from that row; an invariant whose query fails is recorded as an error and the
    others still run."""
    report = audit.run_audit()
    audit.record_audit(report)
    if report.violations:
        logger.warning("audit: %s invariant violations: %s", report.violations, report.counts)
    return report.counts


@shared_task(acks_late=True)
def deliver_reclaim_notice_task(notice_id: int) -> dict[str, str]:
    """Polite reclaim: signal a notice's workload through the backend and call its quota's
    checkpoint webhook (outcomes recorded on the notice, never raised: the deadline stands)."""
    return deliver_reclaim_notice(notice_id, get_backend())


@shared_task
def defrag_pools_task() -> dict[str, Any]:
    """Beat: expire stale defragmentation plans; when scheduled defragmentation is on, plan each pool
    and apply inside a maintenance window or when the waiting demand unlocked reaches the threshold.
    One pool that raises is logged and the others still run."""
    report = defrag.run_scheduled_defrag()
    return {
        "applied": report.applied,
        "skipped": report.skipped,
        "failed": list(report.failures.failed_ids),
    }


class TaskFollowUps:
    """scheduling.followups.FollowUps through these Celery tasks (installed at app ready)."""

    def run_cycle(self, group_id: int) -> None:
        send_cycle(group_id)

    def materialize(self, workload_ids: Sequence[int]) -> None:
        ids = list(workload_ids)
        for i in range(0, len(ids), MATERIALIZE_BATCH):
            materialize_workloads_task.delay(ids[i : i + MATERIALIZE_BATCH])

    def release_all(self, items: Sequence[BackendRelease]) -> None:
        for i in range(0, len(items), RELEASE_BATCH):
            release_backend_objects_task.delay(
                [list(item) for item in items[i : i + RELEASE_BATCH]]
            )

    def deliver_reclaim_notice(self, notice_id: int) -> None:
        deliver_reclaim_notice_task.delay(notice_id)
