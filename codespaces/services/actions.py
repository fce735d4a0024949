"""What users (and the idle policy) do to a codespace: start, stop, delete, keep alive. Each is one
transaction, retried when it lost a lock race."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.utils import timezone

from codespaces import lifecycle
from codespaces.choices import (
    DELETABLE_STATES,
    STARTABLE_STATES,
    STOPPABLE_STATES,
    CodespaceState,
    EventKind,
)
from codespaces.delete_preview import codespace_delete_impact, deletes_for_someone_else
from codespaces.models import (
    Codespace,
)
from codespaces.services.create import submit_workload_for
from portal.choices import OperatorActionKind, OperatorTargetKind
from portal.operator_log import clean_reason, record_operator_action
from portal.transactions import in_one_transaction, retry_lost_races
from scheduling import services as scheduling_services

T = TypeVar("T")
S = CodespaceState


def _as_one_transaction(codespace: Codespace, action: Callable[[], T], name: str) -> T:
    """Run a codespace action as one transaction, the outermost one (release_workload and
    submit_workload nest in it), run again from the start when it lost a lock race
    (`portal.transactions.retry_lost_races`; Busy → 503 when every attempt did). Each attempt starts
    from the codespace as the caller passed it: the in-memory changes of a lost attempt
    (`lifecycle.transition` sets the new state on the object) are undone with its rows."""
    fields = [f.attname for f in Codespace._meta.concrete_fields]
    before = {field_name: getattr(codespace, field_name) for field_name in fields}

    def restore() -> None:
        for field_name, value in before.items():
            setattr(codespace, field_name, value)

    def attempt() -> T:
        restore()
        return in_one_transaction(action)

    try:
        return retry_lost_races(attempt, name=name)
    except BaseException:
        restore()
        raise


def start_codespace(codespace: Codespace, *, actor: Any) -> Codespace:
    """Queue a stopped or failed codespace again (a new workload; the home volume is reused).

    Credits the GPU-hours an idle stop freed (cards' worth × time stopped) to `gpu_hours_freed`.
    One transaction, retried when it lost a lock race (`_as_one_transaction`).
    """
    if codespace.state not in STARTABLE_STATES:
        raise lifecycle.refuse_action(codespace, "start")
    return _as_one_transaction(
        codespace, lambda: _start(codespace, actor=actor), "codespaces.start_codespace"
    )


def _start(codespace: Codespace, *, actor: Any) -> Codespace:
    now = timezone.now()
    extra: dict[str, Any] = {}
    if codespace.idle_stopped_at is not None:
        hours = (now - codespace.idle_stopped_at).total_seconds() / 3600
        extra["gpu_hours_freed"] = codespace.gpu_hours_freed + hours * codespace.gpu_fraction
        extra["idle_stopped_at"] = None
    lifecycle.transition(
        codespace,
        S.QUEUED,
        message="Started again: queued for placement; the home volume is kept.",
        actor=actor,
        idle_warned_at=None,
        last_activity_at=now,
        **extra,
    )
    workload = submit_workload_for(codespace)
    lifecycle.update_in_state(codespace, expected=S.QUEUED, workload=workload)
    return codespace


def _release(codespace: Codespace, *, reason: str, delete_home: bool) -> None:
    if codespace.workload_id is not None:
        scheduling_services.release_workload(
            codespace.workload_id, reason=reason, delete_home=delete_home
        )


def cleared_placement() -> dict[str, Any]:
    """What a codespace that no longer holds a placement forgets: an idle warning (where it ran, why it
    waited and why it failed are its workload's, never copied here)."""
    return {"idle_warned_at": None}


def stop_codespace(
    codespace: Codespace,
    *,
    actor: Any,
    reason: str = "Stopped by its owner.",
    kind: str = EventKind.TRANSITION,
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> Codespace:
    """Stop: release the placement (the GPU share goes back to the pool), keep the home volume.

    QUEUED/PLACED/STARTING/RUNNING → STOPPING → STOPPED in one transaction, retried when it lost a
    lock race (`_as_one_transaction`).
    """
    if codespace.state not in STOPPABLE_STATES:
        raise lifecycle.refuse_action(codespace, "stop")

    def stop() -> Codespace:
        lifecycle.transition(codespace, S.STOPPING, message=reason, actor=actor)
        _release(codespace, reason=reason, delete_home=False)
        lifecycle.transition(
            codespace,
            S.STOPPED,
            message="Stopped; the placement is released and the home volume is kept.",
            actor=actor,
            kind=kind,
            data=data,
            stopped_at=timezone.now(),
            **cleared_placement(),
            **fields,
        )
        return codespace

    return _as_one_transaction(codespace, stop, "codespaces.stop_codespace")


def delete_codespace(codespace: Codespace, *, actor: Any, reason: str = "") -> Codespace:
    """Delete: release the placement and delete the home volume; DELETING → DELETED. One
    transaction, retried when it lost a lock race (`_as_one_transaction`).

    Deleting another user's codespace (an operator, a team admin) needs a `reason`: the owner reads it
    in the codespace's timeline, and the delete is recorded in the operators' activity log (same
    transaction: no delete, no row). The owner's own delete asks for none."""
    if codespace.state not in DELETABLE_STATES:
        raise lifecycle.refuse_action(codespace, "delete")
    for_someone_else = deletes_for_someone_else(actor, codespace)
    reason = clean_reason(reason, required=for_someone_else)
    if for_someone_else:
        by = f"Deleted by {actor.get_username()}" + (f": {reason}" if reason else ".")
    else:
        by = "Deleting the codespace and its home volume."

    def delete() -> Codespace:
        impact = codespace_delete_impact(codespace) if for_someone_else else None
        lifecycle.transition(codespace, S.DELETING, message=by, actor=actor)
        _release(
            codespace,
            reason=by if for_someone_else else "Codespace deleted.",
            delete_home=True,
        )
        lifecycle.transition(
            codespace,
            S.DELETED,
            message="Deleted; the home volume is gone.",
            actor=actor,
            deleted_at=timezone.now(),
            **cleared_placement(),
        )
        if impact is not None:
            record_operator_action(
                actor=actor,
                action=OperatorActionKind.CODESPACE_DELETE,
                target_kind=OperatorTargetKind.CODESPACE,
                target_id=codespace.pk,
                target_name=f"{codespace.owner.get_username()}/{codespace.name}",
                impact=impact,
                reason=reason,
            )
        return codespace

    return _as_one_transaction(codespace, delete, "codespaces.delete_codespace")


def keep_codespace(codespace: Codespace, *, actor: Any) -> Codespace:
    """The owner's "keep it running": records activity and clears an idle warning."""
    if codespace.state != S.RUNNING:
        raise lifecycle.refuse_action(codespace, "keep")
    now = timezone.now()
    if not lifecycle.update_in_state(
        codespace, expected=S.RUNNING, last_activity_at=now, idle_warned_at=None
    ):
        raise lifecycle.StaleState(
            f"Codespace '{codespace.name}' is no longer running; reload the page.",
            fields={"state": ["Expected running."]},
        )
    lifecycle.record_event(
        codespace, EventKind.KEPT, "Kept running; the idle timer starts again.", actor=actor
    )
    return codespace


def set_move_consent(codespace: Codespace, *, actor: Any, consent: bool) -> Codespace:
    """The owner's answer to defragmentation: may it stop this codespace and restart it elsewhere (home
    kept) while it is in use? Without consent only an idle codespace moves. Recorded in the timeline."""
    Codespace.objects.filter(pk=codespace.pk).update(move_consent=consent)
    codespace.move_consent = consent
    lifecycle.record_event(
        codespace,
        EventKind.NOTICE,
        "Defragmentation may move it while in use (restart elsewhere, home kept)."
        if consent
        else "Defragmentation moves it only when idle.",
        actor=actor,
        data={"move_consent": consent},
    )
    return codespace
