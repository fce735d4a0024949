"""The API docs (/api/v1/docs/, Swagger UI from drf-spectacular-sidecar) render in Chromium from local
static files only: every request the page makes goes to the portal itself (no CDN)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_swagger_ui_renders_every_operation_without_external_requests(
    page: Any, login: Any, alice: Any, live_server: Any
) -> None:
    # given alice logged in; record every request the docs page makes
    login("alice")
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    # when she opens the API docs
    page.goto("/api/v1/docs/")
    page.wait_for_selector(".swagger-ui .opblock", timeout=20000)
    # then Swagger UI shows the API's operations, titled from the schema
    assert "Tessera API" in page.inner_text(".swagger-ui .info")
    paths = page.locator(".swagger-ui .opblock-summary-path").all_inner_texts()
    assert "/api/v1/me/" in [p.replace("\u200b", "") for p in paths]
    assert "/api/v1/tokens/{id}/revoke/" in [p.replace("\u200b", "") for p in paths]
    # and nothing was fetched from anywhere but the portal
    external = [
        url
        for url in requested
        if not url.startswith(live_server.url) and not url.startswith("data:")
    ]
    assert external == []
    assert any(url.endswith("/api/v1/schema/") for url in requested)
