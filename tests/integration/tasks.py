"""Tasks only the integration tests send (imported by the test worker: portal/settings_test.py)."""

from __future__ import annotations

import time

from celery import shared_task
from django.conf import settings

from portal.redis_clients import redis_client


@shared_task(name="tests.integration.tasks.record_runs_task")
def record_runs_task(key: str, first_run_seconds: float) -> int:
    """Count its runs in the broker's Redis under `key`; the first run takes `first_run_seconds` (long
    enough to kill its worker in the middle), a redelivered run finishes at once and sets `key:done`.
    Idempotent like every real task: a second run only repeats the same writes."""
    client = redis_client(settings.CELERY_BROKER_URL)
    runs = int(client.incr(f"{key}:runs"))
    if runs == 1:
        time.sleep(first_run_seconds)
    client.set(f"{key}:done", runs)
    return runs


@shared_task(name="tests.integration.tasks.count_sweep_runs_task")
def count_sweep_runs_task(key: str) -> int:
    """A stand-in sweep: counts its runs in the broker's Redis under `key`."""
    return int(redis_client(settings.CELERY_BROKER_URL).incr(f"{key}:runs"))
