"""The shell around every page: styled 403/404 (JSON under /api/), the favicon, an API root that says where
the documentation is, and API docs that load nothing from another host."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.test import Client

from quotas.tests.factories import QuotaFactory, QuotaGroupFactory

pytestmark = pytest.mark.django_db


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_unknown_page_is_the_styled_404_and_unknown_api_path_is_json(alice: Any) -> None:
    client = client_for(alice)
    page = client.get("/no-such-page/")
    assert page.status_code == 404
    html = page.content.decode()
    assert 'data-testid="error-404"' in html
    assert "Page not found" in html
    assert 'data-testid="user-menu"' in html  # inside the shell, with navigation
    api = client.get("/api/v1/no-such-thing/")
    assert api.status_code == 404
    assert api.json()["error"]["code"] == "not_found"


def test_page_a_member_may_not_use_is_the_styled_403(alice: Any, team_a: Any) -> None:
    quota = QuotaFactory(group=QuotaGroupFactory(name="training"), tenant=team_a)
    response = client_for(alice).get(f"/quotas/{quota.pk}/edit/")
    assert response.status_code == 403
    html = response.content.decode()
    assert 'data-testid="error-403"' in html
    assert "Not allowed" in html


@pytest.mark.parametrize(
    "path", ["/codespaces/savings/", "/operators/activity/", "/cluster/nodes/1/"]
)
def test_a_member_on_an_operator_page_gets_the_styled_404_even_with_debug_on(
    bob: Any, settings: Any, path: str
) -> None:
    # issue 38: with DEBUG=True (make run) members saw Django's debug 404 listing every URL
    settings.DEBUG = True
    response = client_for(bob).get(path)
    assert response.status_code == 404
    html = response.content.decode()
    assert 'data-testid="error-404"' in html
    assert "URLconf" not in html


def test_every_page_names_a_local_favicon_and_favicon_ico_redirects_to_it(client: Client) -> None:
    html = client.get("/accounts/login/").content.decode()
    assert re.search(r'<link rel="icon" href="/static/portal/favicon[^"]*\.svg"', html)
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert re.fullmatch(r"/static/portal/favicon[^/]*\.svg", response["Location"])


def test_api_root_links_the_docs_and_the_schema(client: Client) -> None:
    response = client.get("/api/v1/")
    assert response.status_code == 200
    body = response.json()
    assert body["docs"] == "http://testserver/api/v1/docs/"
    assert body["redoc"] == "http://testserver/api/v1/redoc/"
    assert body["schema"] == "http://testserver/api/v1/schema/"
    assert client.get(body["schema"]).status_code in (200, 401, 403)


@pytest.mark.parametrize("path", ["/api/v1/redoc/", "/api/v1/docs/"])
def test_api_docs_load_nothing_from_another_host(alice: Any, path: str) -> None:
    html = client_for(alice).get(path).content.decode()
    assert "<script" in html
    external = re.findall(r'(?:src|href)="((?:https?:)?//[^"]+)"', html)
    assert external == []
    assert "fonts.googleapis.com" not in html
    # nor do the scripts it loads (ReDoc's bundle fetched its logo from cdn.redoc.ly)
    client = client_for(alice)
    for src in re.findall(r'<script[^>]* src="([^"]+)"', html):
        if src.startswith(settings.STATIC_URL):
            found = finders.find(src.removeprefix(settings.STATIC_URL))
            assert found, src
            script = Path(found).read_bytes()
        else:
            response = client.get(src)
            assert response.status_code == 200, src
            script = response.content
        assert re.findall(rb'src:"(?:https?:)?//[^"]*"', script) == [], src
