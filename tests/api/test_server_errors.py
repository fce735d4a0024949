"""A 500 on an /api/ path answers the API's JSON error body, wherever it happened (a view, or a
middleware around the views such as the idempotency one when the database connection died); other
paths keep Django's HTML page. Neither shows a traceback or the exception's text."""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError
from django.test import override_settings

from portal.api import idempotency

SECRET = "server closed the connection unexpectedly (host=db-7 password=hunter2)"


def dead_database(*args: Any, **kwargs: Any) -> Any:
    raise OperationalError(SECRET)


@pytest.fixture
def quiet_client(alice: Any, api_as: Any) -> Any:
    """Alice's API client, answering a 500 response instead of re-raising the exception."""
    client = api_as(alice)
    client.raise_request_exception = False
    return client


def assert_json_server_error(response: Any) -> None:
    assert response.status_code == 500
    assert response["Content-Type"].startswith("application/json")
    body = json.loads(response.content)
    assert body["error"]["code"] == "server_error"
    assert body["error"]["message"]
    assert SECRET not in response.content.decode()
    assert "Traceback" not in response.content.decode()


@pytest.mark.django_db
@override_settings(DEBUG=False)
def test_api_500_in_the_idempotency_middleware_is_a_json_error_body(quiet_client: Any) -> None:
    # given the database fails while the idempotency middleware takes the key
    with mock.patch.object(idempotency, "_enter", side_effect=dead_database):
        # when a POST with an Idempotency-Key arrives
        response = quiet_client.post(
            "/api/v1/tokens/",
            data=json.dumps({"name": "ci"}),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="key-1",
        )
    # then the answer is the API's JSON error body, not Django's HTML page
    assert_json_server_error(response)


@pytest.mark.django_db
@override_settings(DEBUG=False)
def test_api_500_in_a_view_is_a_json_error_body(quiet_client: Any) -> None:
    with mock.patch("portal.api.views.ApiTokenViewSet.list", side_effect=dead_database):
        response = quiet_client.get("/api/v1/tokens/")
    assert_json_server_error(response)


@pytest.mark.django_db
@override_settings(DEBUG=False)
def test_page_500_keeps_the_html_error_page(client: Any, alice: Any) -> None:
    client.raise_request_exception = False
    client.force_login(alice)
    with mock.patch("dashboards.home_views.render", side_effect=dead_database):
        response = client.get("/")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
    assert SECRET not in response.content.decode()
