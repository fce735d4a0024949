"""The claims-to-identity rules of single sign-on (portal.sso.claims, portal.sso.config): pure, no
database, no provider; and the admin page of the identities."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.choices import MembershipRole
from portal.models import OidcIdentity
from portal.sso.claims import identity_from_claims, roles_from_groups
from portal.sso.config import ROLE_NAMES, OidcConfig, parse_group_map
from portal.sso.errors import SsoError
from portal.tests.factories import UserFactory


def make_config(**overrides: Any) -> OidcConfig:
    values: dict[str, Any] = {
        "discovery_url": "https://idp.example.com/.well-known/openid-configuration",
        "client_id": "tessera",
        "client_secret": "s",
        "scopes": "openid email profile",
        "provider_name": "IdP",
        "username_claim": "preferred_username",
        "groups_claim": "groups",
        "operator_groups": frozenset({"tessera-operators"}),
        "team_group_prefix": "team-",
        "group_map": (("ml-leads", "ml", "tenant_admin"), ("ml-users", "ml", "member")),
        "timeout_seconds": 5.0,
    }
    values.update(overrides)
    return OidcConfig(**values)


def test_groups_map_to_operator_and_team_roles_with_the_higher_role_winning() -> None:
    groups = ["tessera-operators", "team-vision", "ml-users", "ml-leads", "team-Bad_Slug", "other"]
    assert roles_from_groups(groups, make_config()) == (
        True,
        {"vision": "member", "ml": "tenant_admin"},
    )


def test_member_group_listed_after_admin_group_keeps_the_admin_role() -> None:
    assert roles_from_groups(["ml-leads", "ml-users"], make_config()) == (
        False,
        {"ml": "tenant_admin"},
    )


def test_no_prefix_means_only_the_map_makes_memberships() -> None:
    config = make_config(team_group_prefix="")
    assert roles_from_groups(["team-vision", "ml-users"], config) == (False, {"ml": "member"})


def test_identity_from_claims_bounds_names_and_reads_the_configured_claims() -> None:
    claims = {
        "sub": "abc",
        "login": "dana",
        "email": "dana@example.com",
        "given_name": "D" * 400,
        "roles": ["team-vision"],
    }
    identity = identity_from_claims(
        claims, make_config(username_claim="login", groups_claim="roles")
    )
    assert identity.username == "dana"
    assert identity.subject == "abc"
    assert identity.first_name == "D" * 150
    assert identity.team_roles == (("vision", "member"),)
    assert identity.is_operator is False


@pytest.mark.parametrize(
    ("_case", "claims", "message"),
    [
        ("no sub", {"preferred_username": "x"}, "sent no 'sub' claim"),
        ("sub too long", {"sub": "s" * 256, "preferred_username": "x"}, "at most 255"),
        ("blank username", {"sub": "s", "preferred_username": "   "}, "claim is empty"),
        ("username a number", {"sub": "s", "preferred_username": 7}, "claim is not text"),
        (
            "too many groups",
            {"sub": "s", "preferred_username": "x", "groups": ["g"] * 501},
            "at most 500",
        ),
        (
            "group too long",
            {"sub": "s", "preferred_username": "x", "groups": ["g" * 256]},
            "longer than 255",
        ),
        (
            "group not text",
            {"sub": "s", "preferred_username": "x", "groups": [1]},
            "not a list of group names",
        ),
    ],
)
def test_bad_claims_are_refused_naming_the_claim(
    _case: str, claims: dict[str, Any], message: str
) -> None:
    with pytest.raises(SsoError, match=message):
        identity_from_claims(claims, make_config())


def test_group_map_reads_roles_and_defaults_to_member() -> None:
    assert parse_group_map(" a=team-a:tenant_admin, b=team-b ,c=team-c:member,") == (
        ("a", "team-a", "tenant_admin"),
        ("b", "team-b", "member"),
        ("c", "team-c", "member"),
    )


@pytest.mark.parametrize("raw", ["no-equals", "g=", "=team-a", "g=team-a:owner"])
def test_group_map_entry_that_cannot_be_read_stops_start_up_naming_it(raw: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=f"TESSERA_OIDC_GROUP_MAP: {raw!r}"):
        parse_group_map(raw)


def test_group_map_role_names_are_membership_roles() -> None:
    assert set(ROLE_NAMES.values()) == set(MembershipRole.values)


@pytest.mark.django_db
def test_admin_lists_and_shows_sso_identities(client: Any, operator: Any) -> None:
    # given an SSO-linked account; when an operator opens its admin pages
    linked = OidcIdentity.objects.create(
        user=UserFactory(username="sso-user"), issuer="https://idp", subject="abc"
    )
    client.force_login(operator)
    listing = client.get("/admin/portal/oidcidentity/")
    change = client.get(f"/admin/portal/oidcidentity/{linked.pk}/change/")
    # then both load and show the subject
    assert listing.status_code == 200
    assert "abc" in listing.content.decode()
    assert change.status_code == 200
