"""Real concurrent transactions on PostgreSQL: the status sync and a job cancel take their locks in
the one global order (docs/adr/0002), so they queue instead of deadlocking (#4)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from django.db import connection

from portal.tests.locks import start, wait_until_blocked_on_a_lock
from scheduling import services
from scheduling.backends.base import ObservedPhase, StatusReport
from scheduling.choices import GangState, WorkloadState
from scheduling.models import Gang
from scheduling.services import reconcile, workloads
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="row locks and deadlocks need PostgreSQL"
    ),
]

MEMBER = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 4, "gpu_milli": 1000}


def test_cancel_racing_the_status_sync_answers_200_and_nothing_deadlocks(
    alice: Any, team_a: Any, api_as: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    # No cycles from the threads (eager Celery tasks in threads leave Celery's state behind).
    monkeypatch.setattr(workloads, "trigger_cycle", lambda group_id: None)
    caplog.set_level(logging.WARNING)
    # given alice's gang of two pods, placed
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    quota = make_quota(make_group(), team_a)
    gang = services.submit_gang(
        tenant=team_a, quota=quota, name="train", owner=alice, members=[MEMBER] * 2,
        min_available=2, timeout_seconds=600,
    )  # fmt: skip
    services.run_cycle(quota.group_id)
    members = list(gang.members.order_by("pk"))
    assert {m.state for m in members} == {WorkloadState.PLACED}
    # and a status sync that reports them running and stops after it wrote the members' rows,
    # just before it writes the gang's row
    wrote_members, go_on = threading.Event(), threading.Event()
    real_refresh = reconcile.refresh_gang_states

    def refresh_later(gang_ids: Any) -> None:
        wrote_members.set()
        go_on.wait(10)
        real_refresh(gang_ids)

    monkeypatch.setattr(reconcile, "refresh_gang_states", refresh_later)
    reports = [StatusReport(m.pk, ObservedPhase.RUNNING) for m in members]
    sync, synced = start(lambda: reconcile.apply_status_reports(reports))
    assert wrote_members.wait(10)
    # when alice cancels the job meanwhile, and the sync goes on once the cancel waits for it
    client = api_as(alice)
    cancel, cancelled = start(lambda: client.post(f"/api/v1/jobs/{gang.pk}/cancel/"))
    wait_until_blocked_on_a_lock(cancel)
    go_on.set()
    sync.join(30)
    cancel.join(30)
    # then both succeed, one after the other, without a deadlock on the way
    assert synced.error is None, synced.error
    assert synced.value.running == 2
    assert cancelled.error is None, cancelled.error
    assert cancelled.value.status_code == 200, cancelled.value.content
    assert cancelled.value.json()["state"] == GangState.CANCELLED
    assert Gang.objects.get(pk=gang.pk).state == GangState.CANCELLED
    assert set(gang.members.values_list("state", flat=True)) == {WorkloadState.RELEASED}
    assert [r.getMessage() for r in caplog.records if "deadlock" in r.getMessage()] == []
