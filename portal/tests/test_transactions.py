"""portal.transactions: a transaction that lost a lock race is run again, a bounded number of times."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg.errors
import pytest
from django.db import IntegrityError, OperationalError, connection, transaction

from portal import transactions
from portal.errors import Busy
from portal.models import Tenant
from portal.tests.locks import lost_race, start, terminate_own_session
from portal.transactions import retry_transaction, run_in_transaction

DEADLOCK = psycopg.errors.DeadlockDetected
SERIALIZATION = psycopg.errors.SerializationFailure


def flaky(failures: list[BaseException], calls: list[int]) -> Callable[[], Tenant]:
    """A transaction body that writes a tenant, then raises the next of `failures` (if any left)."""

    def body() -> Tenant:
        calls.append(1)
        tenant = Tenant.objects.create(slug=f"t-{len(calls)}", name="T")
        if failures:
            raise failures.pop(0)
        return tenant

    return body


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """No real sleeping; the pauses the helper asked for, in order."""
    asked: list[float] = []
    monkeypatch.setattr(transactions.time, "sleep", asked.append)
    return asked


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("_case", "failure"),
    [
        ("deadlock 40P01", lambda: lost_race(DEADLOCK())),
        ("serialization failure 40001", lambda: lost_race(SERIALIZATION())),
        ("SQLite busy", lambda: lost_race(None, "database is locked")),
    ],
)
def test_a_transaction_that_lost_a_lock_race_runs_again_until_it_commits(
    _case: str, failure: Callable[[], OperationalError], pauses: list[float], settings: Any
) -> None:
    settings.TESSERA_DB_RETRY_ATTEMPTS = 4
    settings.TESSERA_DB_RETRY_BACKOFF_SECONDS = 0.1
    calls: list[int] = []
    # given a body that loses twice, then commits
    tenant = run_in_transaction(flaky([failure(), failure()], calls))
    # then it ran three times, the lost attempts left nothing, and it paused twice, growing
    assert len(calls) == 3
    assert list(Tenant.objects.values_list("slug", flat=True)) == ["t-3"]
    assert tenant.slug == "t-3"
    assert len(pauses) == 2
    assert 0.05 <= pauses[0] <= 0.15
    assert 0.1 <= pauses[1] <= 0.3


@pytest.mark.django_db
def test_it_gives_up_after_the_configured_attempts_with_busy(
    pauses: list[float], settings: Any
) -> None:
    settings.TESSERA_DB_RETRY_ATTEMPTS = 3
    calls: list[int] = []
    # given a body that always loses
    with pytest.raises(Busy) as raised:
        run_in_transaction(flaky([lost_race(DEADLOCK()) for _ in range(5)], calls))
    # then it tried exactly 3 times, wrote nothing and says to retry (HTTP 503, Retry-After)
    assert len(calls) == 3
    assert len(pauses) == 2
    assert not Tenant.objects.exists()
    assert raised.value.code == "busy"
    assert raised.value.http_status == 503
    assert raised.value.headers == {"Retry-After": "1"}
    assert isinstance(raised.value.__cause__, OperationalError)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("_case", "failure", "raised"),
    [
        ("query cancelled 57014", lost_race(psycopg.errors.QueryCanceled(), "canceled"), OperationalError),
        ("unique violation", IntegrityError("duplicate key"), IntegrityError),
        ("not a database error", ValueError("bad"), ValueError),
    ],
)  # fmt: skip
def test_other_errors_are_raised_at_once(
    _case: str, failure: BaseException, raised: type[BaseException], pauses: list[float]
) -> None:
    calls: list[int] = []
    with pytest.raises(raised):
        run_in_transaction(flaky([failure], calls))
    assert len(calls) == 1
    assert pauses == []
    assert not Tenant.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_on_commit_callbacks_run_once_after_the_attempt_that_committed(
    pauses: list[float],
) -> None:
    sent: list[str] = []
    failures = [lost_race(DEADLOCK()), lost_race(SERIALIZATION())]

    @retry_transaction
    def submit(name: str) -> None:
        # each attempt asks for the notification; only the one that commits may send it
        transaction.on_commit(lambda: sent.append(name))
        if failures:
            raise failures.pop(0)

    submit("job-1")
    assert sent == ["job-1"]
    assert len(pauses) == 2


@pytest.mark.django_db(transaction=True)
def test_inside_a_callers_transaction_the_conflict_goes_up_to_the_caller(
    pauses: list[float],
) -> None:
    calls: list[int] = []
    # given a caller's own transaction around the helper: a retry would replay only part of it
    with pytest.raises(OperationalError), transaction.atomic():
        run_in_transaction(flaky([lost_race(DEADLOCK())], calls))
    # then the helper ran once and the whole transaction was rolled back, for the caller to retry
    assert len(calls) == 1
    assert pauses == []
    assert not Tenant.objects.exists()


def test_backoff_doubles_is_jittered_and_capped(settings: Any) -> None:
    settings.TESSERA_DB_RETRY_BACKOFF_SECONDS = 0.5
    for attempt, base in [(1, 0.5), (2, 1.0), (3, 2.0), (6, 2.0)]:
        pauses = {transactions.backoff_seconds(attempt) for _ in range(200)}
        assert min(pauses) >= base * 0.5
        assert max(pauses) <= base * 1.5
        assert len(pauses) > 1  # jittered: two losers do not wake together


@pytest.mark.django_db(transaction=True)
def test_two_transactions_that_deadlock_on_postgresql_both_commit(caplog: Any) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("a real deadlock (40P01) needs PostgreSQL's row locks")
    caplog.set_level(logging.WARNING)
    # given two rows, and two transactions that lock them in opposite orders, meeting in the middle
    first = Tenant.objects.create(slug="first", name="First")
    second = Tenant.objects.create(slug="second", name="Second")
    both_hold_one = threading.Barrier(2, timeout=10)
    attempts: list[str] = []

    def rename(one: Tenant, other: Tenant, name: str) -> None:
        attempts.append(name)
        Tenant.objects.filter(pk=one.pk).update(name=name)
        if attempts.count(name) == 1:
            both_hold_one.wait()  # only the first attempts meet; the retry goes straight through
        Tenant.objects.filter(pk=other.pk).update(name=name)

    # when each runs through the helper
    a, a_done = start(lambda: run_in_transaction(lambda: rename(first, second, "a")))
    b, b_done = start(lambda: run_in_transaction(lambda: rename(second, first, "b")))
    a.join(30)
    b.join(30)
    # then PostgreSQL aborted one (deadlock), the helper ran it again, and both committed
    assert a_done.error is None, a_done.error
    assert b_done.error is None, b_done.error
    assert sorted(attempts) in (["a", "a", "b"], ["a", "b", "b"])
    names = set(Tenant.objects.filter(pk__in=[first.pk, second.pk]).values_list("name", flat=True))
    assert len(names) == 1  # the later commit wrote both rows
    retries = [r.getMessage() for r in caplog.records if "lost a lock race" in r.getMessage()]
    assert len(retries) == 1
    assert "deadlock detected" in retries[0]


@pytest.mark.django_db(transaction=True)
def test_a_transaction_whose_session_the_server_ended_runs_again_on_a_new_connection() -> None:
    """The chaos suite's 500 on a codespace DELETE: the session was terminated mid-transaction.
    Nothing of it was committed, so it runs again and commits once."""
    if connection.vendor != "postgresql":
        pytest.skip("terminates a PostgreSQL backend")
    calls: list[int] = []

    def create() -> Tenant:
        calls.append(1)
        tenant = Tenant.objects.create(slug="once", name="Once")
        if len(calls) == 1:
            terminate_own_session()
            Tenant.objects.count()  # the next statement finds the session gone
        return tenant

    tenant = run_in_transaction(create)
    assert len(calls) == 2
    assert list(Tenant.objects.filter(slug="once").values_list("pk", flat=True)) == [tenant.pk]


@pytest.mark.django_db(transaction=True)
def test_a_session_lost_at_the_commit_is_not_run_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The COMMIT may have been applied before the session died: running the body again could do
    it twice, so that error goes to the caller."""
    if connection.vendor != "postgresql":
        pytest.skip("terminates a PostgreSQL backend")
    calls: list[int] = []

    def create_then_lose_the_session_at_commit() -> None:
        calls.append(1)
        Tenant.objects.create(slug=f"t{len(calls)}", name="T")
        transaction.on_commit(lambda: None)
        terminate_own_session()  # the COMMIT at the block's end is the first statement to fail

    with pytest.raises(Exception) as raised:
        run_in_transaction(create_then_lose_the_session_at_commit)
    assert not isinstance(raised.value, transactions.SessionLost)
    assert calls == [1]
