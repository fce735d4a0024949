"""Codespaces' side of defragmentation (`scheduling.defrag_hooks`): whether a codespace may be moved, and
the notices its owner reads on its timeline before and after a move.

A codespace may be moved (stopped and restarted elsewhere, its home volume kept) when its template allows
it (`CodespaceTemplate.defrag_movable`) and it is idle (the idle policy warned it) or its owner consented
(`Codespace.move_consent`). Scheduling asks; it never imports this app.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from codespaces import lifecycle
from codespaces.choices import CodespaceState, EventKind
from codespaces.models import Codespace
from scheduling.defrag_hooks import MoveNotice


def movability(workload_ids: Sequence[int]) -> Mapping[int, str | None]:
    """For each workload of a codespace: None when it may move, or why it may not."""
    out: dict[int, str | None] = {}
    for c in Codespace.objects.filter(workload_id__in=list(workload_ids)).select_related(
        "template"
    ):
        if c.workload_id is None:
            continue
        if c.state != CodespaceState.RUNNING:
            out[c.workload_id] = "the codespace is not running"
        elif not c.template.defrag_movable:
            out[c.workload_id] = f"template {c.template.name} does not allow moving its codespaces"
        elif c.idle_warned_at is None and not c.move_consent:
            out[c.workload_id] = "the codespace is in use and its owner has not agreed to moves"
        else:
            out[c.workload_id] = None
    return out


def record_move_notices(notices: Sequence[MoveNotice]) -> None:
    """One timeline entry per moved codespace (inside the apply transaction): before, what will happen
    and why; after, where it went."""
    by_workload = {n.workload_id: n for n in notices}
    for c in Codespace.objects.filter(workload_id__in=list(by_workload)):
        n = by_workload[c.workload_id]  # type: ignore[index]
        if n.stage == "before":
            message = (
                f"{n.reason} It is stopped on {n.from_node} and restarted on {n.to_node}; "
                "the home volume is kept."
            )
        else:
            message = (
                f"Moved from {n.from_node} to {n.to_node} by defragmentation plan {n.plan_id}."
            )
        lifecycle.record_event(
            c,
            EventKind.NOTICE,
            message,
            data={"defrag_plan": n.plan_id, "stage": n.stage, "reason": n.reason},
        )
