"""A test cannot leave this process' Celery app unable to send for the tests after it (tests/celery_state.py,
checked after every test by the root conftest)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from kombu import pools as kombu_pools

from portal.celery import app as celery_app
from tests import celery_state

pytestmark = pytest.mark.django_db


def acquire_a_producer() -> None:
    """What every send does first (apply_async outside eager mode, send_task)."""
    with celery_app.producer_or_acquire():
        pass


@pytest.fixture
def pools_in_use() -> None:
    acquire_a_producer()  # the app now holds its pools, as after any earlier send in the run


def test_an_on_commit_send_works_after_the_connections_are_reset(
    pools_in_use: None, django_capture_on_commit_callbacks: Any
) -> None:
    celery_state.reset_connections()
    sent: list[str] = []

    def send() -> None:
        acquire_a_producer()
        sent.append("sent")

    with django_capture_on_commit_callbacks(execute=True):
        transaction.on_commit(send)
    assert sent == ["sent"]
    assert celery_state.problems(celery_state.conf_values()) == []


def test_pools_closed_under_the_app_are_named(pools_in_use: None) -> None:
    kombu_pools.reset()  # closes the pools the app holds without dropping them
    try:
        assert celery_state.problems(celery_state.conf_values()) == [
            "Celery's broker connection pool (app.pool) is closed",
            "Celery's producer pool (app.amqp.producer_pool) is closed",
        ]
        with pytest.raises(RuntimeError, match="Acquire on closed pool"):
            acquire_a_producer()
    finally:
        celery_state.reset_connections()
    acquire_a_producer()


def test_a_setting_not_put_back_is_named() -> None:
    before = celery_state.conf_values()
    celery_app.conf.task_always_eager = not before["task_always_eager"]
    try:
        assert celery_state.problems(before) == [
            f"Celery setting task_always_eager is {not before['task_always_eager']!r}, "
            f"was {before['task_always_eager']!r}"
        ]
    finally:
        celery_app.conf.task_always_eager = before["task_always_eager"]
    assert celery_state.problems(before) == []
