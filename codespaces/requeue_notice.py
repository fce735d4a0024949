"""What a codespace's timeline says when its workload went back to the queue: the operator who moved
it, what they did and their reason (from the audit trail, `portal.OperatorAction`), or, when no
operator action moved it since it was last placed, "Requeued by the scheduler: <why>"."""

from __future__ import annotations

from codespaces.choices import EventKind
from codespaces.models import Codespace
from portal.operator_log import actions_on_workloads, operator_notice


def requeue_message(codespace: Codespace, workload_id: int, why: str) -> str:
    """The timeline entry of a requeue of `codespace` (its workload `workload_id`); `why` is the
    scheduler's reason, used when no operator action moved it since its last placement."""
    placed = (
        codespace.events.filter(kind=EventKind.PLACED)
        .order_by("-created_at", "-id")
        .values_list("created_at", flat=True)
        .first()
    )
    moved_by = [
        entry
        for entry in actions_on_workloads([workload_id], since=placed or codespace.created_at)
        if entry.actor_name  # a person did it (not the inventory sync or a test harness)
    ]
    if moved_by:
        return f"{operator_notice(moved_by[0]).rstrip('.')}."
    return f"Requeued by the scheduler: {why.rstrip('.')}."
