"""The workload follow-up: the timeline records what a codespace's scheduling workload did.

What a codespace *is* is derived (`codespaces.phase.observe`), so nothing here is needed for a page or
the API to be right. This records the history: one event per phase step (placed, starting, running,
requeued, failed, reclaimed), a waiting reason when it changes, the start time when it runs, and a
reclaim's stop (desired state → stopped). It runs as `follow_codespace_workloads_task` (ids in, enqueued
after the scheduling commit by the observer in `codespaces.observer`) and, as a safety net for a lost
task, from `reconcile_codespaces_task` on beat."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from codespaces import lifecycle, phase
from codespaces.choices import ACTIVE_STATES, PLACED_STATES, CodespaceState, EventKind
from codespaces.models import (
    Codespace,
)
from codespaces.phase import Observed
from codespaces.requeue_notice import requeue_message
from codespaces.services.actions import cleared_placement
from portal.errors import Conflict
from portal.periodic import ItemFailures, run_each

logger = logging.getLogger(__name__)
S = CodespaceState


def sync_from_workloads(
    workload_ids: list[int] | tuple[int, ...], *, failures: ItemFailures | None = None
) -> int:
    """Record on each codespace's timeline what its current workload did (the follow-up task's body).

    PENDING → QUEUED with a waiting event when the reason changes; PLACED → PLACED → STARTING; RUNNING
    → RUNNING; FAILED → FAILED; RELEASED/SUCCEEDED while the codespace was active (a reclaim) →
    STOPPING → STOPPED with a notice, home kept. Returns how many codespaces changed. Idempotent: each
    step is a compare-and-set on the recorded phase, so a second run finds nothing to do.
    Each codespace is synced on its own (`portal.periodic.run_each`): one that raises is logged with its
    id and counted in `failures`, and the others are still synced.
    """
    changed = 0
    codespaces = Codespace.objects.filter(workload_id__in=list(workload_ids)).select_related(
        "workload", "template", "owner", "tenant"
    )

    def sync(codespace: Codespace) -> None:
        nonlocal changed
        try:
            changed += int(_sync_one(codespace))
        except Conflict:
            # Someone else moved it first (user stop, idle task); their transition wins.
            logger.info("codespace %s changed while syncing; skipped", codespace.pk)

    run_each(codespaces, sync, task="codespace-sync", kind="codespace", failures=failures)
    return changed


def reconcile_codespaces(failures: ItemFailures | None = None) -> int:
    """Follow the workload of every active codespace (the observer's safety net, run on beat).
    Returns how many changed; codespaces whose sync raised are counted in `failures`."""
    ids = list(
        Codespace.objects.filter(state__in=(S.QUEUED, S.PLACED, S.STARTING, S.RUNNING))
        .exclude(workload__isnull=True)
        .values_list("workload_id", flat=True)
    )
    return sync_from_workloads(ids, failures=failures)


def _sync_one(codespace: Codespace) -> bool:
    """Record on the timeline what the codespace's workload did since the last follow-up: walk the
    recorded phase (`state`) to the observed one (`codespaces.phase.observe`) along legal transitions,
    one event per step, and note a new waiting reason. Returns whether anything was written."""
    workload = codespace.workload
    if workload is None or codespace.state not in ACTIVE_STATES:
        return False
    observed = codespace.observed
    target = observed.phase
    steps = list(phase.path(codespace.state, target))
    if target in PLACED_STATES and codespace.state in PLACED_STATES:
        before = _last_placed_where(codespace)
        if before and (before.get("node_name"), before.get("gpu_names")) != (
            observed.node_name,
            observed.gpu_names,
        ):
            # Requeued and placed again between two follow-ups (GPU/node failure, drain): show the
            # detour instead of keeping a stale location.
            steps = [S.QUEUED, *phase.path(S.QUEUED, target)]
    for step in steps:
        _record_step(codespace, step, workload, observed)
    waited = _record_waiting(codespace, observed) if codespace.state == S.QUEUED else False
    return bool(steps) or waited


def _last_placed_where(codespace: Codespace) -> dict[str, Any]:
    """Where the timeline last recorded the codespace placed ({} when it never was)."""
    data = codespace.events.filter(kind=EventKind.PLACED).values_list("data", flat=True).first()
    return data if isinstance(data, dict) else {}


def _record_step(codespace: Codespace, step: str, workload: Any, observed: Observed) -> None:
    """One step of the walk to the observed phase, with the message and timestamps it always had."""
    now = timezone.now()
    if step == S.QUEUED:
        if codespace.state in PLACED_STATES and observed.phase in PLACED_STATES:
            where = _last_placed_where(codespace)
            old = where.get("node_name", "")
            old = f"{old} / {where['gpu_names']}" if where.get("gpu_names") else old
            why = (
                f"its placement on {old} was released (GPU or node failure, drain, defragmentation)"
            )
        else:
            why = workload.failure_reason or workload.pending_reason or "capacity changed"
        lifecycle.transition(
            codespace,
            S.QUEUED,
            message=requeue_message(codespace, workload.pk, why),
            kind=EventKind.NOTICE,
            **cleared_placement(),
        )
    elif step == S.PLACED:
        where = {
            "node_name": observed.node_name,
            "gpu_names": observed.gpu_names,
            "gpu_model_placed": observed.gpu_model_placed,
        }
        lifecycle.transition(
            codespace,
            S.PLACED,
            message=(
                f"Placed on {observed.node_name or '?'} {observed.gpu_names} "
                f"{observed.gpu_model_placed}".strip()
            ),
            kind=EventKind.PLACED,
            data=where,
        )
    elif step == S.STARTING:
        lifecycle.transition(
            codespace, S.STARTING, message="Starting the container and mounting the home volume."
        )
    elif step == S.RUNNING:
        lifecycle.transition(
            codespace,
            S.RUNNING,
            message="Running; connect with the web IDE or ssh.",
            started_at=now,
            last_activity_at=now,
            idle_warned_at=None,
        )
    elif step == S.FAILED:
        reason = workload.failure_reason or "the scheduler reported a failure"
        lifecycle.transition(
            codespace,
            S.FAILED,
            message=f"Failed: {reason}",
            kind=EventKind.FAILED,
            **cleared_placement(),
        )
    elif step == S.STOPPING:
        reason = _reclaim_reason(workload)
        lifecycle.transition(codespace, S.STOPPING, message=f"Reclaimed by the scheduler: {reason}")
    elif step == S.STOPPED:
        reason = _reclaim_reason(workload)
        lifecycle.transition(
            codespace,
            S.STOPPED,
            message=f"Stopped because the scheduler reclaimed its GPU ({reason}); "
            "the home volume is kept, start it again when you need it.",
            kind=EventKind.RECLAIMED,
            stopped_at=now,
            **cleared_placement(),
        )


def _reclaim_reason(workload: Any) -> str:
    return workload.failure_reason or workload.pending_reason or "capacity was reclaimed"


def _record_waiting(codespace: Codespace, observed: Observed) -> bool:
    """A PENDING event when the workload waits for a reason the timeline has not told yet."""
    reason = observed.pending_reason
    if not reason:
        return False
    last = (
        codespace.events.exclude(kind__in=[EventKind.IDLE_WARNING, EventKind.KEPT])
        .values_list("kind", "data")
        .first()
    )
    if (
        last is not None
        and last[0] == EventKind.PENDING
        and (last[1] or {}).get("reason") == reason
    ):
        return False
    position = (
        f" (position {observed.queue_position} in the queue)" if observed.queue_position else ""
    )
    lifecycle.record_event(
        codespace,
        EventKind.PENDING,
        f"Waiting: {reason}{position}",
        data={
            "code": observed.pending_code,
            "queue_position": observed.queue_position,
            "reason": reason,
        },
    )
    return True
