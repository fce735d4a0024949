"""The ONE module that changes a codespace's state.

What a codespace *is* now is derived (`codespaces.phase.observe`, `Codespace.phase`); its `state`
column caches that phase for the database (the unique live name, the list indexes and filters, the
compare-and-set below: `Codespace`'s docstring says why it stays). `transition` is the only function
that writes it: a new codespace starts at the column's default (`INITIAL_STATE`, the phase `observe`
gives a codespace that wants to run and has no workload yet), the user's actions move it, and the
workload follow-up (`codespaces.services.sync`) walks it to the observed phase. Each move also records
the desired state it implies (`phase.desired_for`: a stop → stopped, a delete → deleted, anything else
→ running).

Every transition is a compare-and-set on the state column (`filter(pk=..., state=expected).update(...)`):
if another request, the scheduling observer or the idle task moved the codespace first, zero rows match
and the caller gets a `Conflict` naming both states instead of silently overwriting. Only the moves listed
in `codespaces.choices.TRANSITIONS` are legal; anything else is refused with a `Conflict` (409 in the
API). Each transition writes one `CodespaceEvent` (the timeline).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from codespaces.choices import TRANSITIONS, CodespaceState, DesiredState, EventKind
from codespaces.models import Codespace, CodespaceEvent
from codespaces.phase import desired_for, observed_phase
from portal.db import insert
from portal.errors import Conflict
from portal.scoping import signed_in_or_none

ACTION_NEEDS = {
    "start": "only a stopped or failed codespace can be started",
    "stop": "only a queued, placed, starting or running codespace can be stopped",
    "delete": "it is already being deleted or gone",
    "keep": "only a running codespace can be kept alive",
}


INITIAL_STATE = observed_phase(DesiredState.RUNNING, None)
"""The state a new codespace is inserted with: the phase of one that wants to run and has no workload
yet (queued; the model field's default, checked in codespaces/tests/test_state_cache.py)."""


class IllegalTransition(Conflict):
    """The state machine has no edge from the current state to the requested one."""

    code = "illegal_transition"


class StaleState(Conflict):
    """The codespace changed state under the caller (compare-and-set matched no row)."""

    code = "state_changed"


def is_legal(from_state: str, to_state: str) -> bool:
    return to_state in TRANSITIONS.get(from_state, frozenset())


def _label(state: str) -> str:
    return CodespaceState(state).label.lower()


def refuse_action(codespace: Codespace, action: str) -> IllegalTransition:
    """The error for a user action that the current state does not allow."""
    return IllegalTransition(
        f"Codespace '{codespace.name}' is {_label(codespace.state)}; {ACTION_NEEDS[action]}.",
        fields={"state": [f"Cannot {action} a {_label(codespace.state)} codespace."]},
    )


def record_event(
    codespace: Codespace,
    kind: str,
    message: str,
    *,
    actor: Any = None,
    from_state: str = "",
    to_state: str = "",
    data: dict[str, Any] | None = None,
    pk: int | None = None,
) -> CodespaceEvent:
    """Append one entry to the codespace's timeline (with the primary key `pk` when one was
    reserved: then nothing is read back)."""
    event = CodespaceEvent(
        pk=pk,
        codespace=codespace,
        kind=kind,
        message=message,
        actor=signed_in_or_none(actor),
        from_state=from_state,
        to_state=to_state,
        data=data or {},
    )
    insert(event)
    return event


@transaction.atomic
def transition(
    codespace: Codespace,
    to_state: str,
    *,
    message: str,
    expected: str | None = None,
    actor: Any = None,
    kind: str = EventKind.TRANSITION,
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> Codespace:
    """Move `codespace` from `expected` (default: its in-memory state) to `to_state`, setting `fields`.

    Raises IllegalTransition when the state machine forbids the move, StaleState when the row is no
    longer in `expected`. On success the in-memory object carries the new values and one event is written.
    """
    from_state = expected if expected is not None else codespace.state
    if not is_legal(from_state, to_state):
        raise IllegalTransition(
            f"Codespace '{codespace.name}' cannot go from {_label(from_state)} to "
            f"{_label(to_state)}.",
            fields={"state": [f"{from_state} → {to_state} is not a legal transition."]},
        )
    now = timezone.now()
    fields.setdefault("desired_state", desired_for(to_state))
    updated = Codespace.objects.filter(pk=codespace.pk, state=from_state).update(
        state=to_state, version=F("version") + 1, updated_at=now, **fields
    )
    if updated == 0:
        current = Codespace.objects.filter(pk=codespace.pk).values_list("state", flat=True).first()
        now_label = _label(current) if current else "gone"
        raise StaleState(
            f"Codespace '{codespace.name}' is now {now_label}, not {_label(from_state)}; "
            "reload and try again.",
            fields={"state": [f"Expected {from_state}, found {current or 'nothing'}."]},
        )
    for name, value in fields.items():
        setattr(codespace, name, value)
    codespace.state = to_state
    codespace.forget_observed()
    codespace.version = Codespace.objects.values_list("version", flat=True).get(pk=codespace.pk)
    codespace.updated_at = now
    record_event(
        codespace,
        kind,
        message,
        actor=actor,
        from_state=from_state,
        to_state=to_state,
        data=data,
    )
    return codespace


def update_in_state(codespace: Codespace, *, expected: str | None = None, **fields: Any) -> bool:
    """Change non-state fields (pending reason, idle warning, activity) only while the codespace is still
    in `expected` (compare-and-set). Returns False when the state moved on (nothing written)."""
    state = expected if expected is not None else codespace.state
    updated = Codespace.objects.filter(pk=codespace.pk, state=state).update(
        version=F("version") + 1, updated_at=timezone.now(), **fields
    )
    if updated:
        for name, value in fields.items():
            setattr(codespace, name, value)
        codespace.forget_observed()
        codespace.version = Codespace.objects.values_list("version", flat=True).get(pk=codespace.pk)
    return bool(updated)
