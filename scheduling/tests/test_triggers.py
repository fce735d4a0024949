"""Scheduling triggers are deduplicated through Redis: while a shard's cycle is queued and not started,
more submits send no more tasks; once it starts, the next submit sends one again."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from portal.redis_clients import redis_client
from scheduling.services.workloads import clear_cycle_queued, cycle_queued_key, trigger_cycle
from tests.integration.fixtures import require_broker

pytestmark = pytest.mark.django_db


def test_triggers_are_sent_once_per_queued_cycle(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    url = require_broker()
    from scheduling.tasks import run_cycle_task

    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        run_cycle_task, "apply_async", lambda args, queue, headers: sent.append(args)
    )
    group_id = 987_654
    with override_settings(REDIS_URL=url, CELERY_TASK_ALWAYS_EAGER=False):
        redis_client(url).delete(cycle_queued_key(group_id))
        for _ in range(3):
            with django_capture_on_commit_callbacks(execute=True):
                trigger_cycle(group_id)
        assert sent == [(group_id,)]
        clear_cycle_queued(group_id)  # the cycle starts
        with django_capture_on_commit_callbacks(execute=True):
            trigger_cycle(group_id)
        assert sent == [(group_id,), (group_id,)]
        assert 0 < int(redis_client(url).ttl(cycle_queued_key(group_id))) <= 60
        clear_cycle_queued(group_id)


def test_without_redis_every_trigger_is_sent(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    from scheduling.tasks import run_cycle_task

    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        run_cycle_task, "apply_async", lambda args, queue, headers: sent.append(args)
    )
    with override_settings(REDIS_URL="", CELERY_TASK_ALWAYS_EAGER=False):
        for _ in range(2):
            with django_capture_on_commit_callbacks(execute=True):
                trigger_cycle(5)
    assert sent == [(5,), (5,)]
