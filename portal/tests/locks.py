"""Helpers for tests of lock races: run a call in a thread (its own connection) and keep its outcome,
wait until a PostgreSQL backend waits on a lock, and the error a transaction that lost a race raises."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import OperationalError, connection, connections


class Outcome:
    """What a call run in a thread returned or raised."""

    value: Any = None
    error: BaseException | None = None


def start(call: Callable[[], Any]) -> tuple[threading.Thread, Outcome]:
    """Run `call` in a new thread (its own database connection, closed at the end)."""
    outcome = Outcome()

    def run() -> None:
        try:
            outcome.value = call()
        except BaseException as exc:  # noqa: BLE001 - the test asserts on whatever it was
            outcome.error = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def wait_until_blocked_on_a_lock(thread: threading.Thread, timeout: float = 10.0) -> bool:
    """Wait until another backend of this database waits on a lock (row or advisory), or `thread`
    has ended without waiting. True when one is waiting."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                return True
        if not thread.is_alive():
            return False
        time.sleep(0.02)
    return False


def lost_race(cause: BaseException | None, message: str = "deadlock detected") -> OperationalError:
    """The error Django raises for a database error whose driver exception is `cause` (for example
    `psycopg.errors.DeadlockDetected()`; None and "database is locked" for SQLite's)."""
    exc = OperationalError(message)
    exc.__cause__ = cause
    return exc


def terminate_own_session() -> None:
    """End this connection's PostgreSQL session from another one, as a database restart, a failover
    or an operator's `pg_terminate_backend` does to a request or task in the middle of its work."""
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    dsn = f"postgresql://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])
