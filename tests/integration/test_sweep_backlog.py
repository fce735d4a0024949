"""A worker that fell behind runs one copy of a beat sweep, not every queued one (portal.periodic
`claim_sweep`): in the chaos run the default queue held 315 messages at the end, 57 copies each of the
status sync, the MIG driver and the cycle fan-out, and the workloads placed behind them waited 30 s and
more to be made real."""

from __future__ import annotations

import time
import uuid

import pytest

from portal.celery import SWEEP_HEADER
from portal.redis_clients import redis_client
from tests.integration.fixtures import broker_url
from tests.integration.tasks import count_sweep_runs_task, record_runs_task

pytestmark = [pytest.mark.integration]


def _runs(key: str) -> int:
    return int(redis_client(broker_url()).get(f"{key}:runs") or 0)


def _wait(check, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_a_backlog_of_one_sweep_runs_once_and_a_copy_sent_afterwards_runs_again(
    start_celery_worker,
):
    key = f"sweep-{uuid.uuid4().hex[:8]}"
    for _ in range(30):  # what beat sent while the worker was down
        count_sweep_runs_task.apply_async((key,), headers={SWEEP_HEADER: key})
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    record_runs_task.delay(marker, 0)  # queued behind the backlog: done once it is drained
    start_celery_worker(queues=("default",), concurrency=2)
    client = redis_client(broker_url())
    assert _wait(lambda: client.get(f"{marker}:done") is not None, 60), "backlog not drained"
    assert _runs(key) == 1
    count_sweep_runs_task.apply_async((key,), headers={SWEEP_HEADER: key})
    assert _wait(lambda: _runs(key) == 2, 30), "a copy sent after the run was skipped"


def test_copies_sent_by_code_without_beats_stamp_all_run(start_celery_worker):
    key = f"plain-{uuid.uuid4().hex[:8]}"
    for _ in range(5):
        count_sweep_runs_task.delay(key)
    start_celery_worker(queues=("default",), concurrency=2)
    assert _wait(lambda: _runs(key) == 5, 60), f"{_runs(key)} of 5 runs"
