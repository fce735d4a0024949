"""Issue 16: a developer whose codespace an operator moved reads the operator's reason in its timeline."""

from __future__ import annotations

from typing import Any

import pytest

from codespaces.choices import CodespaceState as S
from codespaces.choices import EventKind
from codespaces.tests.test_services import create, run_status_sync
from scheduling import services as scheduling
from scheduling.models import Node

pytestmark = pytest.mark.django_db


def test_a_drained_codespace_shows_the_operator_and_reason_in_its_timeline(
    bob: Any,
    operator: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    # given bob's running codespace on h100-a
    codespace = create(bob, team_a, "bob-dev", capture)
    assert (codespace.state, codespace.node_name) == (S.RUNNING, "h100-a")
    node = Node.objects.get(name="h100-a")
    # when an operator drains its node with a reason
    with capture(execute=True):
        scheduling.drain_node(node.pk, reason="  kernel upgrade  ", actor=operator)
    run_status_sync(capture)
    codespace.refresh_from_db()
    # then its timeline names the operator, the action and the reason, not the scheduler
    notice = codespace.events.get(kind=EventKind.NOTICE, to_state=S.QUEUED)
    assert notice.message == (
        f"Moved by operator {operator.get_username()} (drain node h100-a): kernel upgrade."
    )
    assert not codespace.events.filter(message__startswith="Requeued by the scheduler").exists()


def test_a_requeue_no_operator_caused_still_says_the_scheduler(
    bob: Any,
    operator: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    # given a codespace an operator drained once, placed again since
    codespace = create(bob, team_a, "bob-dev", capture)
    node = Node.objects.get(name="h100-a")
    with capture(execute=True):
        scheduling.drain_node(node.pk, reason="kernel upgrade", actor=operator)
    run_status_sync(capture)
    with capture(execute=True):
        scheduling.uncordon_node(node.pk, actor=operator)
    run_status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.RUNNING
    # when its node then fails on its own (the inventory sync: no operator)
    with capture(execute=True):
        scheduling.set_node_health(Node.objects.get(name=codespace.node_name).pk, healthy=False)
    run_status_sync(capture)
    # then the latest requeue is the scheduler's, the old drain is not blamed again
    latest = codespace.events.filter(kind=EventKind.NOTICE, to_state=S.QUEUED).first()
    assert latest is not None
    assert latest.message.startswith("Requeued by the scheduler: ")
