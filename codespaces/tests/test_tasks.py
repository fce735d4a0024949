"""Beat tasks: the idle check and the reconciler, run eagerly through Celery."""

from __future__ import annotations

from typing import Any

import pytest

from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace
from codespaces.tasks import check_idle_codespaces_task, reconcile_codespaces_task
from codespaces.tests.test_services import create

pytestmark = pytest.mark.django_db


def test_reconcile_task_follows_a_missed_notification(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    assert codespace.state == S.RUNNING
    # given the codespace lost track (as if an observer call was lost) ...
    Codespace.objects.filter(pk=codespace.pk).update(state=S.STARTING)
    # ... the reconciler on beat brings it back in line with its workload
    assert reconcile_codespaces_task.delay().get() == {"changed": 1, "failed": 0, "failed_ids": []}
    assert Codespace.objects.get(pk=codespace.pk).state == S.RUNNING
    assert reconcile_codespaces_task.delay().get() == {"changed": 0, "failed": 0, "failed_ids": []}


def test_reconcile_task_syncs_the_others_when_one_codespace_raises(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: Any,
) -> None:
    # issue 9: one bad row must not stop a periodic task
    from codespaces.services import sync

    first = create(bob, team_a, "bob-one", django_capture_on_commit_callbacks)
    second = create(bob, team_a, "bob-two", django_capture_on_commit_callbacks)
    Codespace.objects.filter(pk__in=[first.pk, second.pk]).update(state=S.STARTING)
    original = sync._sync_one

    def flaky(codespace: Codespace) -> bool:
        if codespace.pk == first.pk:
            raise KeyError("unexpected workload state")
        return original(codespace)

    monkeypatch.setattr(sync, "_sync_one", flaky)
    assert reconcile_codespaces_task.delay().get() == {
        "changed": 1,
        "failed": 1,
        "failed_ids": [first.pk],
    }
    states = dict(Codespace.objects.values_list("name", "state"))
    assert states == {"bob-one": S.STARTING, "bob-two": S.RUNNING}


def test_idle_task_reports_what_it_did(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    result = check_idle_codespaces_task.delay().get()
    # just started: nothing idle yet
    assert result == {
        "checked": 1,
        "warned": [],
        "stopped": [],
        "cleared": [],
        "failed": 0,
        "failed_ids": [],
    }
