"""Concurrent creates by one engineer: the per-user limit holds however the requests interleave."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction

from codespaces import services
from codespaces.models import Codespace
from portal.errors import InvalidInput
from scheduling.models import Workload
from scheduling.services import workloads

pytestmark = pytest.mark.django_db(transaction=True)


def test_creates_queued_behind_the_owner_lock_never_pass_the_per_user_limit(
    bob: Any, team_a: Any, quota_a: Any, template: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL (SQLite serialises whole writes)")
    # No scheduling cycles from these threads: the tests run Celery tasks eagerly, and eager tasks
    # in concurrent threads leave Celery's process-wide "inside a task" flag set behind them, which
    # breaks later tests that wait for a real worker's result.
    monkeypatch.setattr(workloads, "trigger_cycle", lambda group_id: None)
    assert template.max_per_user == 2
    outcomes: list[str] = []

    def create(name: str) -> None:
        try:
            services.create_codespace(
                user=bob, tenant=team_a, template="pytorch", preset="cpu", name=name
            )
            outcomes.append("created")
        except InvalidInput as exc:
            outcomes.append(exc.fields["template"][0])
        finally:
            connections.close_all()

    # given another transaction holds bob's row: four creates pass validation and wait for the lock
    with transaction.atomic():
        get_user_model().objects.select_for_update().get(pk=bob.pk)
        threads = [threading.Thread(target=create, args=(f"race-{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        assert outcomes == []  # all of them are queued behind the lock
    # when it commits they go one at a time, each counting what the ones before it committed
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["Limit reached: 2 of 2 codespaces per user."] * 2 + ["created"] * 2
    assert Codespace.objects.filter(owner=bob).count() == 2
    assert Workload.objects.count() == 2
