"""A job cancel that keeps losing lock races answers 503 `busy` and changes nothing, never a 500 (#4)."""

from __future__ import annotations

from typing import Any

import psycopg.errors
import pytest

from portal import transactions
from portal.tests.locks import lost_race
from scheduling import services
from scheduling.choices import GangState
from scheduling.models import Placement
from scheduling.services import workloads
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db

MEMBER = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000}


def test_cancel_that_loses_every_lock_race_answers_503_and_changes_nothing(
    alice: Any, team_a: Any, api_as: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    # given alice's placed job, and a database where every attempt to cancel it deadlocks
    small_cluster(gpu_nodes=1, gpus_per_node=4)
    quota = make_quota(make_group(), team_a)
    gang = services.submit_gang(
        tenant=team_a, quota=quota, name="train", owner=alice, members=[MEMBER] * 2,
        min_available=2, timeout_seconds=600,
    )  # fmt: skip
    services.run_cycle(quota.group_id)
    settings.TESSERA_DB_RETRY_ATTEMPTS = 3
    monkeypatch.setattr(transactions.time, "sleep", lambda seconds: None)
    attempts: list[int] = []

    def deadlocked(*args: Any, **kwargs: Any) -> Any:
        attempts.append(1)
        raise lost_race(psycopg.errors.DeadlockDetected())

    monkeypatch.setattr(workloads, "_finish", deadlocked)
    # when she cancels it
    response = api_as(alice).post(f"/api/v1/jobs/{gang.pk}/cancel/")
    # then the API says to retry, after trying 3 times, and the job runs on as it was
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "busy"
    assert "nothing was changed" in response.json()["error"]["message"]
    assert response["Retry-After"] == "1"
    assert len(attempts) == 3
    gang.refresh_from_db()
    assert gang.state == GangState.PLACED
    assert Placement.objects.filter(released_at__isnull=True).count() == 2
