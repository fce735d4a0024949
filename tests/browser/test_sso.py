"""Browser: a person logs in through the OIDC provider's own login form (tests/oidc_provider.py) and
lands in Tessera in the team and with the role their groups give."""

from __future__ import annotations

from typing import Any

import pytest

from portal.choices import MembershipRole
from portal.models import Membership
from portal.tests.factories import TenantFactory
from tests.oidc_provider import OidcProvider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_person_logs_in_through_the_provider_and_lands_in_their_team_with_their_role(
    page: Any, oidc_provider: OidcProvider
) -> None:
    # given team-a, and kim at the provider in ml-leads (tenant admin of team-a by the group map)
    TenantFactory(slug="team-a", name="Team A")
    TenantFactory(slug="team-b", name="Team B")
    oidc_provider.add_user("kim", "kims-password", groups=["ml-leads"])
    # when kim opens the portal, chooses the SSO button and signs in on the provider's page
    page.goto("/codespaces/")
    page.click("[data-testid=sso-login]")
    page.wait_for_selector("#idp-username")
    assert page.url.startswith(oidc_provider.issuer)
    page.fill("#idp-username", "kim")
    page.fill("#idp-password", "kims-password")
    page.click("#idp-submit")
    page.wait_for_selector("[data-testid=user-menu]")
    # then she is back on the page she asked for, logged in as kim, working in Team A only
    assert page.url.endswith("/codespaces/")
    assert "kim" in page.inner_text("[data-testid=user-menu]")
    assert page.locator("#tenant-select option:checked").inner_text() == "Team A"
    assert page.locator("#tenant-select option").all_inner_texts() == ["Team A"]
    # and as Team A's tenant admin, as the home page says
    page.goto("/")
    assert "Tenant admin" in page.inner_text("[data-testid=my-teams]")
    assert dict(
        Membership.objects.filter(user__username="kim").values_list("tenant__slug", "role")
    ) == {"team-a": MembershipRole.TENANT_ADMIN}


def test_login_page_shows_both_ways_in(page: Any, oidc_provider: OidcProvider) -> None:
    page.goto("/accounts/login/")
    assert page.inner_text("[data-testid=sso-login]") == "Log in with Test IdP"
    assert page.locator("#id_username").is_visible()
    assert page.locator("#id_password").is_visible()
