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
    assert reconcile_codespaces_task.delay().get() == 1
    assert Codespace.objects.get(pk=codespace.pk).state == S.RUNNING
    assert reconcile_codespaces_task.delay().get() == 0


def test_idle_task_reports_what_it_did(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    result = check_idle_codespaces_task.delay().get()
    # just started: nothing idle yet
    assert result == {"checked": 1, "warned": [], "stopped": [], "cleared": []}
