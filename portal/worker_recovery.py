"""Dead-worker takeover: the messages a killed Celery worker held go back to their queues within seconds.

With the Redis broker a worker holds every message it received (running, prefetched, or waiting for a
retry's countdown) in Redis' `unacked` hash until it acks it (tasks ack late). A worker that is
SIGKILLed, OOM-killed or loses its node never acks, and Redis itself only hands such messages out
again after the broker's `visibility_timeout`, which must stay longer than the longest task plus the
longest retry countdown (or a live worker's slow task would run twice at once), i.e. minutes.

So every worker process that consumes (the main process; its pool children run the tasks):

- heartbeats: `SET tessera:worker:alive:<incarnation> EX dead_after` every `heartbeat` seconds, and
  keeps itself in the set `tessera:workers`;
- records the delivery tag of every message it receives in `tessera:worker:inflight:<incarnation>`
  (a sorted set scored by time; entries older than the visibility timeout are trimmed: Redis restores
  those anyway);
- on every heartbeat looks for incarnations whose alive key expired and puts their in-flight messages
  back at the head of their queues (kombu's `restore_by_tag`, a Redis transaction that does nothing
  for a message already acked or restored), then forgets that incarnation.

A worker's pool child that dies is handled by Celery itself (`task_reject_on_worker_lost`: requeued at
once). Recovery after a whole worker dies: at most `dead_after` + `heartbeat` seconds until the
messages are queued again, then the next free worker takes them.

A worker restarted by its supervisor does not wait for that: an incarnation with its own node name
(`name@host`, unique per worker) on this host whose process is gone is its dead predecessor, taken over
as the restarted worker starts, before its first heartbeat interval. Without this, the only consumer
of a queue (each scheduling worker's shard queues) restarted in a second or two and then sat idle for
up to `dead_after` + `heartbeat` seconds while the work its predecessor held waited (issue 38: a killed
scheduling worker's queue took up to 14.9 s to drain). Tasks are idempotent (docs/adr/0003),
so a worker that was only stalled past `dead_after` and then finishes is harmless.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

WORKERS_KEY = "tessera:workers"


def alive_key(incarnation: str) -> str:
    return f"tessera:worker:alive:{incarnation}"


def inflight_key(incarnation: str) -> str:
    return f"tessera:worker:inflight:{incarnation}"


def new_incarnation(hostname: str | None = None) -> str:
    """Unique per worker process start: a restarted worker with the same node name is a new one."""
    return f"{hostname or socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def incarnation_process(incarnation: str) -> tuple[str, int] | None:
    """(node name, pid) of an incarnation made by `new_incarnation`; None for anything else."""
    node, _, rest = incarnation.rpartition(":")
    node, _, pid = node.rpartition(":")
    if not node or not rest or not pid.isdigit():
        return None
    return node, int(pid)


def process_exists(pid: int) -> bool:
    """A process with this pid runs on this host (in this pid namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


@dataclass
class WorkerRecovery:
    """The bookkeeping of one consuming worker process, on the broker's Redis (`client`)."""

    client: Any  # redis.Redis
    incarnation: str
    heartbeat_seconds: float = 1.0
    dead_after_seconds: float = 3.0
    retention_seconds: float = 3600.0
    clock: Callable[[], float] = time.time
    host: str = field(default_factory=socket.gethostname)
    pid_exists: Callable[[int], bool] = process_exists
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def beat(self) -> None:
        """Say this worker is alive for the next `dead_after_seconds` (alive key before membership,
        so no other worker ever sees it listed without its key)."""
        self.client.set(
            alive_key(self.incarnation), "1", px=max(1, int(self.dead_after_seconds * 1000))
        )
        self.client.sadd(WORKERS_KEY, self.incarnation)

    def track(self, delivery_tag: str) -> None:
        """Remember a message this worker received (until it is acked or it outlives retention)."""
        now = self.clock()
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(inflight_key(self.incarnation), {delivery_tag: now})
        pipe.zremrangebyscore(inflight_key(self.incarnation), "-inf", now - self.retention_seconds)
        pipe.execute()

    def dead_incarnations(self) -> list[str]:
        """Workers listed in `tessera:workers` whose alive key expired, or that are this worker's
        dead predecessor (`is_dead_predecessor`); never this one."""
        members = sorted(_text(m) for m in self.client.smembers(WORKERS_KEY))
        others = [m for m in members if m != self.incarnation]
        if not others:
            return []
        alive = self.client.exists  # one round trip per worker: a handful of workers
        return [m for m in others if self.is_dead_predecessor(m) or not alive(alive_key(m))]

    def is_dead_predecessor(self, other: str) -> bool:
        """`other` ran under this worker's node name, on this host (the node name's `@host` is this
        host's name), and its process is gone: the supervisor restarted this worker after it died,
        so its alive key, still counting down, proves nothing."""
        mine, theirs = incarnation_process(self.incarnation), incarnation_process(other)
        if mine is None or theirs is None or mine[0] != theirs[0] or mine[1] == theirs[1]:
            return False
        if mine[0].rpartition("@")[2] != self.host:
            return False
        return not self.pid_exists(theirs[1])

    def take_over(self, restore: Callable[[str], None]) -> dict[str, int]:
        """Put the in-flight messages of every dead worker back in their queues with `restore(tag)`;
        returns {incarnation: messages handed to restore}. Safe when two workers do it at once."""
        restored: dict[str, int] = {}
        for dead in self.dead_incarnations():
            tags = [_text(t) for t in self.client.zrange(inflight_key(dead), 0, -1)]
            for tag in tags:
                restore(tag)
            self.client.delete(inflight_key(dead))
            self.client.srem(WORKERS_KEY, dead)
            restored[dead] = len(tags)
            if tags:
                logger.warning(
                    "worker %s stopped heartbeating: %d unacknowledged messages requeued",
                    dead,
                    len(tags),
                )
        return restored

    def forget_self(self) -> None:
        """A graceful shutdown: the broker connection's close gives our messages back already."""
        self.client.delete(alive_key(self.incarnation), inflight_key(self.incarnation))
        self.client.srem(WORKERS_KEY, self.incarnation)

    # --- the heartbeat thread ---------------------------------------------------------------------

    def start(self, restore: Callable[[str], None]) -> None:
        """Take over dead workers at once (a restarted worker's predecessor first of all), then
        heartbeat and take over every `heartbeat_seconds` in a daemon thread."""
        self.beat()
        try:
            self.take_over(restore)
        except Exception:  # the broker is flapping: the heartbeat thread tries again
            logger.exception("dead-worker takeover at start failed")
        self._thread = threading.Thread(
            target=self._run, args=(restore,), name="tessera-worker-heartbeat", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.heartbeat_seconds * 2)

    def _run(self, restore: Callable[[str], None]) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                self.beat()
                self.take_over(restore)
            except Exception:  # the broker is down or flapping: keep beating, log once per beat
                logger.exception("worker heartbeat failed")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
