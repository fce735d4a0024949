"""A PostgreSQL session the server dropped (restart, failover, idle timeout, pg_terminate_backend) is
noticed before the next request or task uses it: persistent connections are health-checked, and Celery
tasks drop unusable connections before and after they run. Issue item 8: requests answered 500 and
each worker failed one task after PostgreSQL dropped its sessions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from wsgiref.util import setup_testing_defaults

import psycopg
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.handlers.wsgi import WSGIHandler
from django.db import connection
from django.test import Client

from portal.tasks import health_check_task

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
        reason="terminating a server session needs PostgreSQL (DATABASE_URL=postgres://...)",
    ),
]


def terminate_this_session() -> None:
    """Kill the server side of this thread's persistent connection from another session, as a
    PostgreSQL restart or an idle-session timeout would; the Django side does not notice."""
    pid = connection.connection.info.backend_pid
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.fixture
def persistent_connections() -> Iterator[None]:
    """Connections kept between requests, as in production (DB_CONN_MAX_AGE, default 60 s)."""
    previous = connection.settings_dict["CONN_MAX_AGE"]
    connection.settings_dict["CONN_MAX_AGE"] = 60
    connection.close()
    yield
    connection.settings_dict["CONN_MAX_AGE"] = previous
    connection.close()


def wsgi_get(path: str, cookie: str) -> tuple[str, bytes]:
    """One request through Django's real WSGI handler (the test Client skips the request_started
    connection housekeeping that runs in production)."""
    environ: dict[str, Any] = {"PATH_INFO": path, "HTTP_COOKIE": cookie, "REQUEST_METHOD": "GET"}
    setup_testing_defaults(environ)
    environ["SERVER_NAME"] = "testserver"
    status: list[str] = []
    response = WSGIHandler()(environ, lambda s, headers, exc_info=None: status.append(s))
    body = b"".join(response)
    response.close()  # type: ignore[attr-defined]  # request_finished, as a WSGI server calls it
    return status[0], body


def test_a_request_after_postgresql_dropped_the_session_succeeds(
    persistent_connections: None,
) -> None:
    # given a logged-in user whose first request opened a persistent connection
    user = get_user_model().objects.create_user("stale", password="x")
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    assert wsgi_get("/", cookie)[0] == "200 OK"
    assert connection.connection is not None
    # when PostgreSQL drops that session between two requests
    terminate_this_session()
    # then the next request reconnects instead of answering 500
    status, body = wsgi_get("/", cookie)
    assert status == "200 OK", body[:500]


def test_a_task_after_postgresql_dropped_the_session_succeeds(
    persistent_connections: None,
) -> None:
    # given a task that ran and left its connection open
    assert health_check_task.apply().get()["status"] == "ok"
    assert connection.connection is not None
    # when PostgreSQL drops that session between two tasks
    terminate_this_session()
    # then the next task reconnects instead of failing
    result = health_check_task.apply()
    assert result.successful(), result.traceback
    assert result.get()["database"] == "postgresql"
