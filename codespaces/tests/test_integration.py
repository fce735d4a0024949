"""A codespace through a real Celery worker (subprocess) against Redis and the test database: the cycle,
the backend and the workload observer all run in the worker process, so this proves the observer is
registered there (AppConfig.ready) and that the tasks survive real serialization."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from codespaces import services
from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace
from scheduling.models import Workload
from scheduling.queues import worker_queues

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def state_of(pk: int) -> str:
    return Codespace.objects.values_list("state", flat=True).get(pk=pk)


def test_codespace_runs_stops_and_starts_through_the_worker(
    start_celery_worker: Any, bob: Any, team_a: Any, quota_a: Any, template: Any
) -> None:
    from scheduling.tasks import sync_status_task

    start_celery_worker(queues=worker_queues())
    codespace = services.create_codespace(
        user=bob, tenant=team_a, template="pytorch", preset="quarter-h100", name="bob-dev"
    )
    # the worker runs the cycle, places it and (as the observer) moves the codespace on
    wait_until(lambda: state_of(codespace.pk) == S.STARTING, "starting (placed by the worker)")

    def running() -> bool:
        sync_status_task.delay()  # what beat does: the simulated cluster reports it running
        time.sleep(0.5)
        return state_of(codespace.pk) == S.RUNNING

    wait_until(running, "running")
    codespace.refresh_from_db()
    assert codespace.node_name == "h100-a"
    assert codespace.gpu_model_placed == "H100"

    services.stop_codespace(codespace, actor=bob)
    assert state_of(codespace.pk) == S.STOPPED
    first = codespace.workload_id
    services.start_codespace(codespace, actor=bob)
    wait_until(lambda: state_of(codespace.pk) == S.STARTING, "placed again")
    codespace.refresh_from_db()
    assert codespace.workload_id != first
    assert Workload.objects.get(pk=first).state == "released"
