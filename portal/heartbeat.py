"""Is scheduling happening? The banner on every page, `/healthz` and `/metrics` read it here.

The heartbeat is the start of the latest scheduling cycle: the `SweepRun` row of the beat entry
`scheduling-cycles`, which the worker updates (one UPDATE, portal.periodic `claim_sweep`) each time it
starts a cycle that beat sent. A fresh row proves the whole chain at once: beat sends, the broker
delivers, a worker runs it and reaches the database. It is the same row on the embedded default and in
production, and it needs no broker to read, so a broker that does not answer shows as a stale heartbeat,
never as an error page.

When the heartbeat is older than TESSERA_SCHEDULING_DOWN_AFTER_SECONDS, `scheduling_status` says why,
as far as it can tell (only then, so a healthy page costs one indexed read): the broker does not answer;
no worker heartbeats on it (portal.worker_recovery's `tessera:worker:alive:*` keys); or workers are
alive and beat sends nothing. Each web process caches the reading for CACHE_SECONDS.

Off (always up) when tasks run eagerly (tests, TESSERA_CELERY_EAGER): there is no worker to watch.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from portal.models import SweepRun
from portal.worker_recovery import WORKERS_KEY, alive_key

logger = logging.getLogger(__name__)

CYCLE_SWEEP = "scheduling-cycles"  # the CELERY_BEAT_SCHEDULE entry that triggers scheduling cycles
CACHE_SECONDS = 2.0
BROKER_TIMEOUT_SECONDS = 0.5  # a broker that does not answer must not hold a page for long
PROCESS_STARTED_AT = timezone.now()  # the reference before any cycle ever ran

CAUSE_BROKER_DOWN = "the broker does not answer"
CAUSE_NO_WORKER = "no worker heartbeat"
CAUSE_NO_BEAT = (
    "workers are alive but no cycle started (beat is not running, or the workers are busy)"
)
CAUSE_NO_CYCLE = "no scheduling cycle has started"
CAUSE_DATABASE_DOWN = "the database does not answer"


@dataclass(frozen=True)
class SchedulingStatus:
    """One reading: `since` is the last cycle's start (or this process' start when none ever ran)."""

    up: bool
    since: datetime
    last_cycle_at: datetime | None
    age_seconds: float
    down_after_seconds: float
    cause: str = ""
    watched: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "up": self.up,
            "watched": self.watched,
            "last_cycle_at": self.last_cycle_at.isoformat() if self.last_cycle_at else None,
            "age_seconds": round(self.age_seconds, 3),
            "down_after_seconds": self.down_after_seconds,
            "cause": self.cause,
        }


def watched() -> bool:
    """False when no worker is expected (tasks run eagerly in the calling process)."""
    return not settings.CELERY_TASK_ALWAYS_EAGER


def read_scheduling_status(now: datetime | None = None) -> SchedulingStatus:
    """Read the heartbeat now (uncached); the cause is looked up only when it is stale."""
    now = now or timezone.now()
    down_after = float(settings.TESSERA_SCHEDULING_DOWN_AFTER_SECONDS)
    if not watched():
        return SchedulingStatus(True, now, None, 0.0, down_after, watched=False)
    try:
        last = (
            SweepRun.objects.filter(name=CYCLE_SWEEP).values_list("started_at", flat=True).first()
        )
    except DatabaseError:
        logger.exception("could not read the scheduling heartbeat")
        return SchedulingStatus(False, now, None, 0.0, down_after, CAUSE_DATABASE_DOWN)
    since = last or PROCESS_STARTED_AT
    age = max(0.0, (now - since).total_seconds())
    if age <= down_after:
        return SchedulingStatus(True, since, last, age, down_after)
    return SchedulingStatus(False, since, last, age, down_after, _cause())


_lock = threading.Lock()
_cached: list[tuple[float, SchedulingStatus]] = []


def scheduling_status() -> SchedulingStatus:
    """`read_scheduling_status`, cached per process for CACHE_SECONDS (every page asks)."""
    with _lock:
        if _cached and time.monotonic() - _cached[0][0] < CACHE_SECONDS:
            return _cached[0][1]
    status = read_scheduling_status()
    with _lock:
        _cached[:] = [(time.monotonic(), status)]
    return status


def forget_cached_status() -> None:
    with _lock:
        _cached.clear()


def _cause() -> str:
    url = str(settings.CELERY_BROKER_URL)
    if not url.startswith(("redis://", "rediss://")):
        return CAUSE_NO_CYCLE
    try:
        client = _broker_client(url)
        members = [
            m.decode() if isinstance(m, bytes) else str(m) for m in client.smembers(WORKERS_KEY)
        ]
        alive = any(client.exists(alive_key(m)) for m in members)
    except Exception:  # connection refused, timeout, wrong protocol: the broker is not usable
        return CAUSE_BROKER_DOWN
    return CAUSE_NO_BEAT if alive else CAUSE_NO_WORKER


@cache
def _broker_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(
        url, socket_timeout=BROKER_TIMEOUT_SECONDS, socket_connect_timeout=BROKER_TIMEOUT_SECONDS
    )
