"""Fixtures for single sign-on tests: a real OIDC provider (tests/oidc_provider.py) on a loopback port,
and the portal's settings pointed at it, with the portal served by pytest-django's live server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from portal.sso.discovery import forget_provider_metadata
from tests.oidc_provider import CLIENT_ID, CLIENT_SECRET, SCOPES, OidcProvider


@pytest.fixture
def oidc_provider(live_server: Any, settings: Any) -> Iterator[OidcProvider]:
    """A running provider that knows the live server as its client; SSO configured to use it
    (operators: group `tessera-operators`; `idp-<slug>` makes a member; `ml-leads` makes a tenant
    admin of team-a)."""
    provider = OidcProvider()
    provider.register_client(f"{live_server.url}/accounts/sso/callback/")
    settings.TESSERA_OIDC_DISCOVERY_URL = provider.issuer
    settings.TESSERA_OIDC_CLIENT_ID = CLIENT_ID
    settings.TESSERA_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.TESSERA_OIDC_SCOPES = SCOPES
    settings.TESSERA_OIDC_PROVIDER_NAME = "Test IdP"
    settings.TESSERA_OIDC_OPERATOR_GROUPS = ["tessera-operators"]
    settings.TESSERA_OIDC_TEAM_GROUP_PREFIX = "idp-"
    settings.TESSERA_OIDC_GROUP_MAP = "ml-leads=team-a:tenant_admin"
    forget_provider_metadata()
    provider.start()
    yield provider
    provider.stop()
    forget_provider_metadata()
