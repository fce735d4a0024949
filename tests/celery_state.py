"""This process' Celery state that a test can change for the ones after it, and the check that it did not.

The app keeps its broker connections in two pools: `app.pool` (connections) and `app.amqp.producer_pool`
(producers), both taken from kombu's process-wide registry (`kombu.pools`). `kombu.pools.reset()` closes
every pool of that registry but leaves the app holding them, so the next send anywhere in the run (an
on-commit hook, a task sent by the live server) fails with "Acquire on closed pool". Reset only through
`reset_connections()`, which drops the app's references first.

The root conftest checks `problems()` after every test and fails the test that left something changed.
"""

from __future__ import annotations

from typing import Any

from kombu import pools as kombu_pools

from portal.celery import app as celery_app

# The app settings a test may point elsewhere (tests/integration/fixtures.py) and must put back.
TOUCHED_CONF = ("task_always_eager", "broker_url", "result_backend", "broker_transport_options")


def conf_values() -> dict[str, Any]:
    return {key: celery_app.conf[key] for key in TOUCHED_CONF}


def reset_connections() -> None:
    """Drop pooled broker connections so the next send uses the broker now configured (kombu's global
    registry of pools per URL too), leaving the app able to send."""
    if celery_app._pool is not None:
        celery_app._pool.force_close_all()
        celery_app._pool = None
    celery_app.amqp._producer_pool = None
    kombu_pools.reset()
    # app.backend is cached per thread; drop it so results go to the backend configured now
    celery_app._local.__dict__.pop("backend", None)


def problems(conf_before: dict[str, Any]) -> list[str]:
    """What a test left changed: closed pools the app still holds, settings not put back."""
    found = []
    connections = celery_app._pool
    if connections is not None and connections._closed:
        found.append("Celery's broker connection pool (app.pool) is closed")
    producers = celery_app.amqp._producer_pool
    if producers is not None and producers._closed:
        found.append("Celery's producer pool (app.amqp.producer_pool) is closed")
    now = conf_values()
    found.extend(
        f"Celery setting {key} is {now[key]!r}, was {conf_before[key]!r}"
        for key in TOUCHED_CONF
        if now[key] != conf_before[key]
    )
    return found
