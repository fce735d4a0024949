"""Run a transaction again when it lost a deadlock or serialization race.

PostgreSQL aborts one of two transactions that wait for each other (SQLSTATE 40P01
`deadlock_detected`) or that cannot be serialized (40001 `serialization_failure`); SQLite answers
`database is locked` when a writer waited longer than its timeout. Nothing of the aborted transaction
was committed, so running it again from the start is safe and gives the answer the caller would have
had without the race. The lock order (docs/adr/0002) keeps these rare; this is the net under it.

The same holds for a transaction whose session the server ended while it ran (a restart, a
failover, `pg_terminate_backend`): `in_one_transaction` tells that apart from a session lost at the
COMMIT (which may have been applied: raised as it is) and it is run again on a new connection.

`retry_transaction` (decorator) and `run_in_transaction` run a function in `transaction.atomic()`
(`retry_lost_races` one that opens its transaction itself),
up to `TESSERA_DB_RETRY_ATTEMPTS` times with jittered exponential backoff, and raise
`portal.errors.Busy` (HTTP 503, `Retry-After`) when every attempt lost. Other errors are raised at
once. `transaction.on_commit` callbacks of a lost attempt are discarded with it, so they run once,
after the attempt that committed. Nested in a transaction the helper started no part of, a retry
would replay only a part of it: there it runs the function once and lets the conflict travel up to
the outermost helper (or caller), which retries the whole transaction.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections, transaction

from portal.errors import Busy

logger = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

#: PostgreSQL SQLSTATEs of a transaction aborted by a lock race (deadlock, serialization failure).
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
#: The longest pause between two attempts, whatever the backoff setting.
MAX_BACKOFF_SECONDS = 2.0


def is_lock_conflict(exc: BaseException) -> bool:
    """Whether `exc` aborted a transaction only because it lost a lock race (safe to run again)."""
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    if code is not None:
        return code in RETRYABLE_SQLSTATES
    return "database is locked" in str(exc)


def backoff_seconds(attempt: int) -> float:
    """The pause after the `attempt`-th lost attempt (1-based): exponential, capped, jittered ±50 %."""
    base = float(settings.TESSERA_DB_RETRY_BACKOFF_SECONDS) * 2 ** (attempt - 1)
    return min(MAX_BACKOFF_SECONDS, base) * random.uniform(0.5, 1.5)  # noqa: S311 - not crypto


def _outermost(using: str) -> bool:
    """Whether a transaction opened now is the outermost one: retrying it replays all of it.
    (pytest-django's and TestCase's own wrapping blocks do not count: tests see the real behaviour.)"""
    blocks = connections[using].atomic_blocks
    return all(getattr(block, "_from_testcase", False) for block in blocks)


def run_in_transaction(
    func: Callable[[], T],
    *,
    using: str = DEFAULT_DB_ALIAS,
    attempts: int | None = None,
    name: str | None = None,
) -> T:
    """`func()` in `transaction.atomic()`, run again (up to `attempts`, default the setting) when
    it lost a lock race; raises Busy when every attempt did. `name` (default: the function's) is
    what the log lines call it. See the module docstring."""

    return retry_lost_races(
        functools.partial(in_one_transaction, func, using=using),
        using=using,
        attempts=attempts,
        name=name or getattr(func, "__qualname__", repr(func)),
    )


class SessionLost(Exception):
    """The database ended the session (a restart, a failover, `pg_terminate_backend`) while a
    transaction's body ran, before its COMMIT was sent: nothing of it was committed, so it is safe to
    run again on a new connection (`in_one_transaction` raises it, `retry_lost_races` retries it)."""


def session_lost(session: object, *, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether the database session `session` (a `connection.connection` taken earlier) is gone:
    Django dropped it (and may have opened another since, e.g. to log an error) or the server
    ended it."""
    conn = connections[using]
    return conn.connection is not session or not conn.is_usable()


def in_one_transaction(func: Callable[[], T], *, using: str = DEFAULT_DB_ALIAS) -> T:
    """`func()` in `transaction.atomic()`. A session the server ended while `func` ran is raised as
    SessionLost; one lost at the COMMIT itself is not (the COMMIT may have been applied), and
    neither is any other error."""
    conn = connections[using]
    conn.ensure_connection()
    session = conn.connection
    body_done = False
    try:
        with transaction.atomic(using=using):
            result = func()
            body_done = True
        return result
    except Exception as exc:  # psycopg's own errors too: its pipeline raises them unwrapped
        if body_done or is_lock_conflict(exc) or isinstance(exc, SessionLost):
            raise
        if not session_lost(session, using=using):
            raise
        raise SessionLost(str(exc)) from exc


def retry_lost_races(
    func: Callable[[], T],
    *,
    using: str = DEFAULT_DB_ALIAS,
    attempts: int | None = None,
    name: str | None = None,
) -> T:
    """`func()`, which opens its transaction itself (e.g. with `portal.db.atomic_pipelined`), run
    again when that transaction lost a lock race, like `run_in_transaction`; raises Busy when every
    attempt did. Called inside a transaction `func` does not own, it runs `func` once."""
    if not _outermost(using):
        return func()
    total = attempts or int(settings.TESSERA_DB_RETRY_ATTEMPTS)
    name = name or getattr(func, "__qualname__", repr(func))
    for attempt in range(1, total + 1):
        try:
            return func()
        except SessionLost as exc:
            connections[using].close()  # the next attempt opens a new session
            if attempt == total:
                raise
            logger.warning("%s: database session lost (attempt %d of %d), running it again: %s",
                           name, attempt, total, exc)  # fmt: skip
            continue
        except OperationalError as exc:
            if not is_lock_conflict(exc):
                raise
            if attempt == total:
                logger.error("%s lost a lock race %d times, giving up: %s", name, total, exc)
                raise Busy(
                    "The database is busy with concurrent changes to the same rows; nothing was "
                    "changed. Try again in a moment.",
                    headers={"Retry-After": "1"},
                ) from exc
            pause = backoff_seconds(attempt)
            logger.warning(
                "%s lost a lock race (attempt %d of %d), retrying in %.3f s: %s",
                name,
                attempt,
                total,
                pause,
                exc,
            )
            time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def retry_transaction(func: Callable[P, T]) -> Callable[P, T]:
    """Decorator: the function runs as one transaction, retried when it lost a lock race."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_in_transaction(
            functools.partial(func, *args, **kwargs), name=f"{func.__module__}.{func.__qualname__}"
        )

    return wrapper
