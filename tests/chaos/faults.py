"""The fault injector: at a fixed interval it SIGKILLs a Celery worker, beat or a gunicorn worker, or
terminates a database session, restarts what a supervisor would restart, and measures how long the
killed component's work takes to resume."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

from tests.chaos.stack import Stack

KINDS = ("worker-scheduling", "worker-default", "beat", "web-worker", "db-session")
RESTART_AFTER = 0.5  # seconds a supervisor takes to notice and restart a dead process
RECOVERY_TIMEOUT = 60.0


@dataclass
class Kill:
    """One injected fault and when its component's work resumed (None: not within the timeout).

    For a Celery worker also its **drain**: `held` messages were the dead worker's work at the kill
    (received and not acknowledged, plus those waiting in the queues it consumes), and `drained_at`
    is when the last of them was processed (acknowledged by whichever worker ran it)."""

    kind: str
    at: float
    target: str = ""
    restarted_at: float | None = None
    recovered_at: float | None = None
    held: int | None = None  # None: not a worker kill
    drained_at: float | None = None
    consuming_at: float | None = None  # the restarted worker heartbeats: its consumer is up

    @property
    def recovery_seconds(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.at

    @property
    def drain_seconds(self) -> float | None:
        return None if self.drained_at is None else self.drained_at - self.at


def _latest(stack: Stack, sql: str) -> float:
    rows = stack.query(sql)
    value = rows[0][0] if rows else None
    return float(value.timestamp()) if value is not None else 0.0


# beat's own sweeps: cycle triggers are sweeps too (`cycle:<group>`, scheduling.tasks.send_cycle), sent
# by every submit and release and run by either worker, so they say nothing of beat or the default worker
BEAT_SWEEPS = "left(name, 6) <> 'cycle:'"


def cycle_ran_since(stack: Stack, since: float) -> bool:
    """A scheduling cycle (scheduling queues worker, queued by beat or by a submit) finished after."""
    return _latest(stack, "SELECT max(last_cycle_at) FROM scheduling_shard") > since


def sweep_started_since(stack: Stack, since: float) -> bool:
    """A periodic sweep (sent by beat, run by the default-queue worker: status sync every second, the
    audit, the reconcilers) started after `since`: the worker takes work again. Read from the sweeps'
    claims (portal.periodic), written as a sweep starts, so the time does not include how long that
    sweep runs (an audit takes 0.5-2 s on this machine)."""
    return (
        _latest(stack, f"SELECT max(started_at) FROM portal_sweeprun WHERE {BEAT_SWEEPS}") > since
    )


def sweep_sent_since(stack: Stack, since: float) -> bool:
    """A periodic sweep beat sent after `since` has started: beat sends again (and a worker runs it)."""
    return _latest(stack, f"SELECT max(sent_at) FROM portal_sweeprun WHERE {BEAT_SWEEPS}") > since


UNACKED_KEY = "unacked"  # kombu's Redis hash of every received, unacknowledged message
WORKER_QUEUES = {"worker-scheduling": "sched-", "worker-default": "default"}


def held_messages(stack: Stack, kind: str, pid: int) -> set[str]:
    """The delivery tags of the work a Celery worker (main process `pid`) holds: the messages it
    received and has not acknowledged (its in-flight record, portal.worker_recovery, that are still
    in kombu's unacked hash) and the messages waiting in the queues it consumes."""
    client = stack.redis()
    incarnations = [
        m.decode() for m in client.smembers("tessera:workers") if f":{pid}:" in m.decode()
    ]
    tags = {
        t.decode()
        for incarnation in incarnations
        for t in client.zrange(f"tessera:worker:inflight:{incarnation}", 0, -1)
    }
    held = {t for t in tags if client.hexists(UNACKED_KEY, t)}
    return held | queued_tags(stack, WORKER_QUEUES[kind])


def worker_consuming(stack: Stack, pid: int) -> bool:
    """The Celery worker with main process `pid` is consuming (it heartbeats once its consumer is
    ready, portal.celery)."""
    return any(f":{pid}:" in m.decode() for m in stack.redis().smembers("tessera:workers"))


def queued_tags(stack: Stack, prefix: str) -> set[str]:
    """Delivery tags of the messages waiting in the queues whose names start with `prefix`."""
    client = stack.redis()
    tags = set()
    for key in client.scan_iter(match=f"{prefix}*"):
        if client.type(key) != b"list":
            continue
        for raw in client.lrange(key, 0, -1):
            tags.add(str(json.loads(raw)["properties"]["delivery_tag"]))
    return tags


def still_held(stack: Stack, kind: str, tags: set[str]) -> set[str]:
    """Which of `tags` are not processed yet: still unacknowledged (running, prefetched, or held by
    a dead worker nobody took over yet) or waiting in a queue."""
    if not tags:
        return set()
    client = stack.redis()
    ordered = sorted(tags)
    unacked = {
        t for t, there in zip(ordered, client.hmget(UNACKED_KEY, ordered), strict=True) if there
    }
    return unacked | (tags & queued_tags(stack, WORKER_QUEUES[kind]))


def api_answers(stack: Stack) -> bool:
    try:
        return requests.get(f"{stack.base_url}/accounts/login/", timeout=2).status_code == 200
    except requests.RequestException:
        return False


@dataclass
class FaultInjector:
    """Runs in its own thread: after `warmup` fault-free seconds, `kills` faults, each `interval`
    seconds after the previous one recovered, kinds in a shuffled rotation (so every kind is injected
    about equally often)."""

    stack: Stack
    kills: int
    interval: float
    seed: int = 0
    warmup: float = 0.0  # fault-free seconds before the first fault
    done: threading.Event = field(default_factory=threading.Event)
    stop_requested: threading.Event = field(default_factory=threading.Event)
    history: list[Kill] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        rng = random.Random(self.seed)
        rotation: list[str] = []
        try:
            if self.stop_requested.wait(max(0.0, self.warmup - self.interval)):
                return
            for _ in range(self.kills):
                if self.stop_requested.wait(self.interval):
                    break
                if not rotation:
                    rotation = list(KINDS)
                    rng.shuffle(rotation)
                self.history.append(self.inject(rotation.pop(), rng))
        except Exception as exc:  # a broken injector must end the run visibly, not hang it
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            self.done.set()

    def inject(self, kind: str, rng: random.Random) -> Kill:
        stack = self.stack
        kill = Kill(kind, time.time())
        if kind == "web-worker":
            workers = stack.web_workers()
            target = rng.choice(workers)
            kill.target = f"gunicorn worker {target}"
            _sigkill(target)
            expected = stack.config.web_workers

            def recovered() -> bool:
                return len(stack.web_workers()) >= expected and api_answers(stack)

        elif kind == "db-session":
            pid = stack.terminate_database_session()
            kill.target = f"backend {pid}" if pid else "(no session)"

            def recovered() -> bool:
                return api_answers(stack) and cycle_ran_since(stack, kill.at)

        else:
            component = stack.components[kind]
            kill.target = f"{kind} pid {component.pid}"
            held: set[str] = set()
            if kind in WORKER_QUEUES:
                held = held_messages(stack, kind, component.pid)
                kill.held = len(held)
                kill.at = time.time()
            component.kill()
            time.sleep(RESTART_AFTER)
            component.start()
            kill.restarted_at = time.time()
            probe: Callable[[Stack, float], bool] = {
                "worker-scheduling": cycle_ran_since,
                "worker-default": sweep_started_since,
                "beat": sweep_sent_since,
            }[kind]

            def recovered() -> bool:
                return probe(stack, kill.at)

        deadline = kill.at + RECOVERY_TIMEOUT
        while time.time() < deadline and not self.stop_requested.is_set():
            if kill.recovered_at is None and recovered():
                kill.recovered_at = time.time()
            if kill.held is not None and kill.consuming_at is None:
                if worker_consuming(stack, stack.components[kind].pid):
                    kill.consuming_at = time.time()
            if kill.held is not None and kill.drained_at is None:
                if not still_held(stack, kind, held):
                    kill.drained_at = time.time()
            if kill.recovered_at is not None and (
                kill.held is None or (kill.drained_at and kill.consuming_at)
            ):
                break
            time.sleep(0.2)
        return kill


def _sigkill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
