"""The codespace state machine, state by state: every legal move, every refused one, and the
compare-and-set that stops two writers from both winning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from codespaces import lifecycle
from codespaces.choices import TRANSITIONS
from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace, CodespaceEvent
from codespaces.tests.factories import CodespaceFactory

pytestmark = pytest.mark.django_db

LEGAL = sorted((a, b) for a, targets in TRANSITIONS.items() for b in targets)
ILLEGAL = sorted((a, b) for a in S.values for b in S.values if b not in TRANSITIONS[a])


def make(bob: Any, team_a: Any, quota_a: Any, state: str) -> Codespace:
    return CodespaceFactory(owner=bob, tenant=team_a, quota=quota_a, state=state)


def test_the_state_machine_is_the_documented_one() -> None:
    assert {a: sorted(b) for a, b in TRANSITIONS.items()} == {
        S.QUEUED: sorted([S.PLACED, S.STARTING, S.RUNNING, S.STOPPING, S.FAILED, S.DELETING]),
        S.PLACED: sorted([S.STARTING, S.RUNNING, S.QUEUED, S.STOPPING, S.FAILED, S.DELETING]),
        S.STARTING: sorted([S.RUNNING, S.QUEUED, S.STOPPING, S.FAILED, S.DELETING]),
        S.RUNNING: sorted([S.QUEUED, S.STOPPING, S.FAILED, S.DELETING]),
        S.STOPPING: sorted([S.STOPPED, S.FAILED, S.DELETING]),
        S.STOPPED: sorted([S.QUEUED, S.DELETING]),
        S.FAILED: sorted([S.QUEUED, S.DELETING]),
        S.DELETING: [S.DELETED],
        S.DELETED: [],
    }
    assert len(LEGAL) + len(ILLEGAL) == len(S.values) ** 2


@pytest.mark.parametrize(("from_state", "to_state"), LEGAL)
def test_legal_transition_moves_and_records_one_event(
    from_state: str, to_state: str, bob: Any, team_a: Any, quota_a: Any
) -> None:
    codespace = make(bob, team_a, quota_a, from_state)
    version = codespace.version
    lifecycle.transition(codespace, to_state, message="test move", actor=bob)
    stored = Codespace.objects.get(pk=codespace.pk)
    assert (stored.state, stored.version) == (to_state, version + 1)
    event = CodespaceEvent.objects.get(codespace=codespace)
    assert (event.from_state, event.to_state, event.message, event.actor) == (
        from_state,
        to_state,
        "test move",
        bob,
    )


@pytest.mark.parametrize(("from_state", "to_state"), ILLEGAL)
def test_illegal_transition_is_refused_and_changes_nothing(
    from_state: str, to_state: str, bob: Any, team_a: Any, quota_a: Any
) -> None:
    codespace = make(bob, team_a, quota_a, from_state)
    with pytest.raises(lifecycle.IllegalTransition) as refused:
        lifecycle.transition(codespace, to_state, message="nope")
    assert refused.value.http_status == 409
    assert refused.value.message == (
        f"Codespace '{codespace.name}' cannot go from {S(from_state).label.lower()} to "
        f"{S(to_state).label.lower()}."
    )
    assert Codespace.objects.get(pk=codespace.pk).state == from_state
    assert not CodespaceEvent.objects.exists()


def test_compare_and_set_refuses_a_stale_writer(bob: Any, team_a: Any, quota_a: Any) -> None:
    # given two copies of the same running codespace (two requests)
    codespace = make(bob, team_a, quota_a, S.RUNNING)
    stale = Codespace.objects.get(pk=codespace.pk)
    # when the first stops it
    lifecycle.transition(codespace, S.STOPPING, message="first")
    # then the second, still believing it is running, gets a conflict naming both states
    with pytest.raises(lifecycle.StaleState) as conflict:
        lifecycle.transition(stale, S.FAILED, message="second")
    assert conflict.value.message == (
        f"Codespace '{codespace.name}' is now stopping, not running; reload and try again."
    )
    assert Codespace.objects.get(pk=codespace.pk).state == S.STOPPING
    assert CodespaceEvent.objects.filter(codespace=codespace).count() == 1


@pytest.mark.parametrize(
    ("_case", "state", "action", "allowed"),
    [
        ("start a running one", S.RUNNING, "start", False),
        ("start a queued one", S.QUEUED, "start", False),
        ("start a stopped one", S.STOPPED, "start", True),
        ("start a failed one", S.FAILED, "start", True),
        ("stop a stopped one", S.STOPPED, "stop", False),
        ("stop a failed one", S.FAILED, "stop", False),
        ("stop a deleting one", S.DELETING, "stop", False),
        ("keep a stopped one", S.STOPPED, "keep", False),
        ("keep a queued one", S.QUEUED, "keep", False),
        ("delete a deleting one", S.DELETING, "delete", False),
        ("delete a stopping one", S.STOPPING, "delete", False),
    ],
)
def test_user_actions_refused_in_the_wrong_state(
    _case: str,
    state: str,
    action: str,
    allowed: bool,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from codespaces import services

    codespace = make(bob, team_a, quota_a, state)
    calls: dict[str, Callable[..., Codespace]] = {
        "start": services.start_codespace,
        "stop": services.stop_codespace,
        "keep": services.keep_codespace,
        "delete": services.delete_codespace,
    }
    call = calls[action]
    if allowed:
        with django_capture_on_commit_callbacks(execute=True):
            call(codespace, actor=bob)
        assert Codespace.objects.get(pk=codespace.pk).state != state
        return
    with pytest.raises(lifecycle.IllegalTransition) as refused:
        call(codespace, actor=bob)
    assert refused.value.message.startswith(
        f"Codespace '{codespace.name}' is {S(state).label.lower()}; "
    )
    assert Codespace.objects.get(pk=codespace.pk).state == state
    assert not CodespaceEvent.objects.exists()
