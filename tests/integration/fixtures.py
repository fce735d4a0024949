"""A real Celery worker process for tests marked `integration`.

`start_celery_worker(queues=...)` launches `celery -A portal worker` in a subprocess against the broker in
TESSERA_TEST_BROKER_URL (default redis://127.0.0.1:6379/15) and the test database, and points this process'
Celery app at the same broker. When no broker answers the test is skipped with the reason, unless
TESSERA_REQUIRE_BROKER=1 (CI), where that is a failure.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from celery._state import _set_task_join_will_block
from django.db import connection

from portal.celery import app as celery_app
from tests import celery_state

ROOT = Path(__file__).resolve().parents[2]


def broker_url() -> str:
    return os.environ.get("TESSERA_TEST_BROKER_URL", "redis://127.0.0.1:6379/15")


def broker_reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or 6379), timeout=1
        ):
            return True
    except OSError:
        return False


def require_broker() -> str:
    url = broker_url()
    if broker_reachable(url):
        return url
    message = f"integration test needs a Celery broker: nothing answers at {url} (TESSERA_TEST_BROKER_URL)"
    if os.environ.get("TESSERA_REQUIRE_BROKER") == "1":
        pytest.fail(message)
    pytest.skip(message)
    raise AssertionError("unreachable")


def _database_url() -> str:
    """DATABASE_URL of the *test* database this process uses (pytest-django renamed it)."""
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    user = s.get("USER") or ""
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


@dataclass
class WorkerProcess:
    """A running `celery worker` subprocess; `kill()` sends SIGKILL, `restart()` starts it again."""

    queues: Sequence[str]
    env: dict[str, str]
    concurrency: int = 2
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(
        default_factory=lambda: ROOT / "var" / f"test-worker-{uuid.uuid4().hex[:8]}.log"
    )

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        node = f"test-{uuid.uuid4().hex[:8]}@%h"
        cmd = [
            sys.executable, "-m", "celery", "-A", "portal", "worker",
            "-Q", ",".join(self.queues), "-c", str(self.concurrency), "-n", node,
            "--without-gossip", "--without-mingle", "--loglevel=INFO",
        ]  # fmt: skip
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready(node.replace("%h", socket.gethostname()))

    def _wait_ready(self, node: str, timeout: float = 45.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"celery worker exited early; log: {self.log_path.read_text()[-3000:]}"
                )
            replies = celery_app.control.ping(destination=[node], timeout=1.0)
            if replies:
                return
        raise RuntimeError(f"celery worker did not answer within {timeout}s; log: {self.log_path}")

    def kill(self) -> None:
        """SIGKILL the whole worker process group (the main process and its pool children)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def start_celery_worker(transactional_db: Any) -> Iterator[Any]:
    """Factory: start_celery_worker(queues=("default",), concurrency=2) -> WorkerProcess."""
    url = require_broker()
    workers: list[WorkerProcess] = []
    previous = celery_state.conf_values()
    try:  # put the app back whatever fails (a worker that does not start or stop): later tests send
        celery_app.conf.update(
            task_always_eager=False, broker_url=url, result_backend=url, broker_transport_options={}
        )
        # Eager tasks mark "inside a task" in a process-wide flag that they save and restore; eager tasks
        # in concurrent threads (an earlier test) can leave it set, and then result.get() here refuses.
        _set_task_join_will_block(False)
        celery_state.reset_connections()
        with celery_app.connection_for_write() as conn:  # start from an empty test broker
            conn.default_channel.client.flushdb()  # type: ignore[attr-defined]

        def start(queues: Sequence[str] = ("default",), concurrency: int = 2) -> WorkerProcess:
            env = dict(os.environ)
            env.update(
                DJANGO_SETTINGS_MODULE="portal.settings_test",
                TESSERA_TEST_WORKER="1",
                TESSERA_TEST_BROKER_URL=url,
                DATABASE_URL=_database_url(),
            )
            worker = WorkerProcess(queues=queues, env=env, concurrency=concurrency)
            workers.append(worker)  # registered first, so a failed start is still cleaned up
            worker.start()
            return worker

        yield start
    finally:
        try:
            for worker in workers:
                worker.stop()
        finally:
            celery_app.conf.update(**previous)
            celery_state.reset_connections()
