"""`portal.periodic.claim_period`: one run per task and period, the claim commits or rolls back with
the run's work, old claims are pruned."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from portal.models import PeriodClaim
from portal.periodic import CLAIM_RETENTION, claim_period, period_start

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 2, 10, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("_case", "now", "seconds", "expected"),
    [
        ("minute", T0 + timedelta(seconds=59), 60, T0),
        ("hour", T0 + timedelta(minutes=29), 3600, T0.replace(minute=0)),
        ("five seconds", T0 + timedelta(seconds=12.5), 5, T0 + timedelta(seconds=10)),
    ],
)
def test_period_start_floors_to_the_period(_case, now, seconds, expected):
    assert period_start(now, seconds) == expected


def test_a_period_is_claimed_once_per_task():
    assert claim_period("ingest", T0) is True
    assert claim_period("ingest", T0) is False
    assert claim_period("prune", T0) is True
    assert claim_period("ingest", T0 + timedelta(minutes=1)) is True
    assert PeriodClaim.objects.count() == 3


def test_a_claim_rolled_back_with_its_failed_run_can_be_claimed_again():
    # given a run that claimed its period and then failed (a transient error, a killed worker)
    def failed_run() -> None:
        with transaction.atomic():
            assert claim_period("ingest", T0) is True
            raise RuntimeError("Prometheus did not answer")

    with pytest.raises(RuntimeError):
        failed_run()
    # then the retry (or the redelivered message) may still do the period's work
    assert claim_period("ingest", T0) is True


def test_claims_older_than_the_retention_are_pruned_when_a_task_claims():
    claim_period("ingest", T0 - CLAIM_RETENTION - timedelta(minutes=1))
    claim_period("prune", T0 - CLAIM_RETENTION - timedelta(minutes=1))
    claim_period("ingest", T0)
    assert set(PeriodClaim.objects.values_list("task_name", "period_start")) == {
        ("prune", T0 - CLAIM_RETENTION - timedelta(minutes=1)),
        ("ingest", T0),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="concurrent writers need PostgreSQL (SQLite serialises them)",
)
def test_two_runs_racing_for_one_period_do_the_work_once():
    barrier = threading.Barrier(2)
    claimed: list[bool] = []

    def run() -> None:
        try:
            barrier.wait(timeout=5)
            with transaction.atomic():
                won = claim_period("ingest", T0)
                claimed.append(won)
                if won:
                    time.sleep(0.3)  # the work, while the other run's INSERT waits for us
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(claimed) == [False, True]
    assert PeriodClaim.objects.filter(task_name="ingest").count() == 1
