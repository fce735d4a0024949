"""Following the scheduling workload (the observer callback and its beat reconciler)."""

from __future__ import annotations

import logging

from django.utils import timezone

from codespaces import lifecycle
from codespaces.choices import (
    CodespaceState,
    EventKind,
)
from codespaces.models import (
    Codespace,
)
from codespaces.services.actions import cleared_placement
from portal.errors import Conflict
from portal.periodic import ItemFailures, run_each
from scheduling.choices import ACTIVE_STATES as WORKLOAD_ACTIVE_STATES
from scheduling.models import Placement, PlacementGpu

logger = logging.getLogger(__name__)
S = CodespaceState


# --- Following the scheduling workload (observer callback) ---------------------------------------


def placement_summary(workload_id: int) -> dict[str, str]:
    """Node, GPU names and GPU model of a workload's active placement ({} when it has none)."""
    placement = (
        Placement.objects.filter(workload_id=workload_id, released_at__isnull=True)
        .select_related("node")
        .first()
    )
    if placement is None:
        return {}
    shares = list(
        PlacementGpu.objects.filter(placement=placement)
        .select_related("gpu")
        .order_by("gpu__index")
    )
    return {
        "node_name": placement.node.name,
        "gpu_names": ", ".join(f"gpu{share.gpu.index}" for share in shares),
        "gpu_model_placed": shares[0].gpu.model if shares else "",
    }


def sync_from_workloads(
    workload_ids: list[int] | tuple[int, ...], *, failures: ItemFailures | None = None
) -> int:
    """Map the state of each codespace's current workload onto the codespace (observer callback).

    PENDING → QUEUED with pending reason and queue position; PLACED → PLACED → STARTING; RUNNING →
    RUNNING; FAILED → FAILED with the reason; RELEASED/SUCCEEDED while the codespace was active (a
    reclaim) → STOPPED with a notice, home kept. Returns how many codespaces changed.
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
    workload = codespace.workload
    if workload is None or codespace.state not in (S.QUEUED, S.PLACED, S.STARTING, S.RUNNING):
        return False
    state = workload.state
    if state == "pending":
        changed = False
        if codespace.state != S.QUEUED:
            lifecycle.transition(
                codespace,
                S.QUEUED,
                message="Requeued by the scheduler: "
                f"{(workload.failure_reason or workload.pending_reason or 'capacity changed').rstrip('.')}.",
                kind=EventKind.NOTICE,
                **cleared_placement(),
            )
            changed = True
        if (workload.pending_reason, workload.pending_code, workload.queue_position) != (
            codespace.pending_reason,
            codespace.pending_code,
            codespace.queue_position,
        ):
            reason_changed = workload.pending_reason != codespace.pending_reason
            lifecycle.update_in_state(
                codespace,
                expected=S.QUEUED,
                pending_reason=workload.pending_reason,
                pending_code=workload.pending_code,
                queue_position=workload.queue_position,
            )
            if reason_changed and workload.pending_reason:
                position = (
                    f" (position {workload.queue_position} in the queue)"
                    if workload.queue_position
                    else ""
                )
                lifecycle.record_event(
                    codespace,
                    EventKind.PENDING,
                    f"Waiting: {workload.pending_reason}{position}",
                    data={"code": workload.pending_code, "queue_position": workload.queue_position},
                )
            changed = True
        return changed
    if state in WORKLOAD_ACTIVE_STATES:
        before = codespace.state
        where = placement_summary(workload.pk)
        moved = where and (where["node_name"], where["gpu_names"]) != (
            codespace.node_name,
            codespace.gpu_names,
        )
        if codespace.state != S.QUEUED and moved:
            # Requeued and placed again between two notifications (GPU/node failure, drain):
            # show the detour instead of keeping a stale location.
            why = workload.failure_reason or (
                f"its placement on {codespace.location} was released (GPU or node failure, drain)"
            )
            lifecycle.transition(
                codespace,
                S.QUEUED,
                message=f"Requeued by the scheduler: {why.rstrip('.')}.",
                kind=EventKind.NOTICE,
                **cleared_placement(),
            )
        if codespace.state == S.QUEUED:
            lifecycle.transition(
                codespace,
                S.PLACED,
                message=(
                    f"Placed on {where.get('node_name', '?')} {where.get('gpu_names', '')} "
                    f"{where.get('gpu_model_placed', '')}".strip()
                ),
                kind=EventKind.PLACED,
                data=where,
                pending_reason="",
                pending_code="",
                queue_position=None,
                **where,
            )
        if codespace.state == S.PLACED:
            lifecycle.transition(
                codespace,
                S.STARTING,
                message="Starting the container and mounting the home volume.",
            )
        if state == "running" and codespace.state == S.STARTING:
            now = timezone.now()
            lifecycle.transition(
                codespace,
                S.RUNNING,
                message="Running; connect with the web IDE or ssh.",
                started_at=now,
                last_activity_at=now,
                idle_warned_at=None,
            )
        return codespace.state != before
    if state == "failed":
        reason = workload.failure_reason or "the scheduler reported a failure"
        lifecycle.transition(
            codespace,
            S.FAILED,
            message=f"Failed: {reason}",
            kind=EventKind.FAILED,
            failure_reason=reason,
            **cleared_placement(),
        )
        return True
    if state in ("released", "succeeded"):
        reason = workload.failure_reason or workload.pending_reason or "capacity was reclaimed"
        lifecycle.transition(codespace, S.STOPPING, message=f"Reclaimed by the scheduler: {reason}")
        lifecycle.transition(
            codespace,
            S.STOPPED,
            message=f"Stopped because the scheduler reclaimed its GPU ({reason}); "
            "the home volume is kept, start it again when you need it.",
            kind=EventKind.RECLAIMED,
            stopped_at=timezone.now(),
            **cleared_placement(),
        )
        return True
    return False
