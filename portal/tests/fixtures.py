"""Personas shared by every app's tests (Healthchecks-style): alice (tenant admin of team-a), bob (member of
team-a), charlie (member of team-b) and an operator (is_staff)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from portal.choices import MembershipRole
from portal.models import Tenant
from portal.services import issue_token
from portal.tests.factories import MembershipFactory, TenantFactory, UserFactory


@pytest.fixture
def team_a(db: Any) -> Tenant:
    return TenantFactory(slug="team-a", name="Team A")


@pytest.fixture
def team_b(db: Any) -> Tenant:
    return TenantFactory(slug="team-b", name="Team B")


@pytest.fixture
def alice(team_a: Tenant) -> Any:
    user = UserFactory(username="alice")
    MembershipFactory(user=user, tenant=team_a, role=MembershipRole.TENANT_ADMIN)
    return user


@pytest.fixture
def bob(team_a: Tenant) -> Any:
    user = UserFactory(username="bob")
    MembershipFactory(user=user, tenant=team_a, role=MembershipRole.MEMBER)
    return user


@pytest.fixture
def charlie(team_b: Tenant) -> Any:
    user = UserFactory(username="charlie")
    MembershipFactory(user=user, tenant=team_b, role=MembershipRole.MEMBER)
    return user


@pytest.fixture
def operator(db: Any) -> Any:
    return UserFactory(username="operator", is_staff=True, is_superuser=True)


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def api_as():  # type: ignore[no-untyped-def]
    """api_as(user) -> an APIClient authenticated with a fresh Bearer token of that user."""

    def make(user: Any) -> APIClient:
        client = APIClient()
        issued = issue_token(user, name="tests")
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
        return client

    return make
