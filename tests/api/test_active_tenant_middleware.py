"""ActiveTenantMiddleware looks the active team up for pages only: API requests name their team, so a
session caller of /api/ pays no tenants query (issue 7 speed targets)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_session_api_request_runs_no_tenants_query(
    bob: Any, django_assert_num_queries: Any
) -> None:
    client = Client()
    client.force_login(bob)
    client.get("/api/v1/me/")
    # session, user, rate-limit upsert, memberships, and /me/'s own read of the memberships' teams
    with django_assert_num_queries(5) as ctx:
        response = client.get("/api/v1/me/")
    assert response.status_code == 200
    assert not [q for q in ctx.captured_queries if 'FROM "portal_tenant"' in q["sql"]]


def test_pages_still_get_the_active_team(bob: Any, team_a: Any) -> None:
    client = Client()
    client.force_login(bob)
    response = client.get("/codespaces/")
    assert response.status_code == 200
    assert response.context["active_tenant"] == team_a
