"""Single sign-on end to end: the portal (live server) against a real OIDC provider on a loopback port
(tests/oidc_provider.py, Authlib), driven by requests following redirects as a browser would."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from joserfc.jwk import RSAKey

from portal.choices import MembershipRole
from portal.models import Membership, OidcIdentity
from portal.tests.factories import DEFAULT_PASSWORD, TenantFactory, UserFactory
from tests.oidc_provider import CLIENT_ID, KEY_ID, OidcProvider

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "idp-password"
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def provider_form(response: requests.Response) -> dict[str, str]:
    return {name: unescape(value) for name, value in HIDDEN.findall(response.text)}


def sso_login(
    base_url: str, username: str, *, next_path: str = "", session: requests.Session | None = None
) -> requests.Response:
    """Start the sign-in at the portal, fill the provider's login form, follow redirects back."""
    session = session or requests.Session()
    start = session.get(f"{base_url}/accounts/sso/start/{next_path}", timeout=10)
    assert start.status_code == 200, start.text  # the provider's login form
    form = provider_form(start)
    form.update(idp_username=username, idp_password=PASSWORD)
    return session.post(start.url.split("?")[0], data=form, timeout=10)


def memberships_of(username: str) -> dict[str, str]:
    return dict(
        Membership.objects.filter(user__username=username).values_list("tenant__slug", "role")
    )


def test_sso_login_creates_user_with_operator_role_and_teams_from_groups(
    live_server: Any, oidc_provider: OidcProvider
) -> None:
    # given teams a and b, and dana at the provider in the operators' group, team-b's group and
    # ml-leads (mapped to tenant admin of team-a)
    TenantFactory(slug="team-a")
    TenantFactory(slug="team-b")
    oidc_provider.add_user(
        "dana",
        PASSWORD,
        groups=["tessera-operators", "idp-team-b", "ml-leads", "idp-no-such-team"],
        given_name="Dana",
    )
    # when dana signs in through the provider, asking for the quotas page
    response = sso_login(live_server.url, "dana", next_path="?next=/quotas/")
    # then she lands on the quotas page, logged in
    assert response.status_code == 200, response.text
    assert response.url == f"{live_server.url}/quotas/"
    assert 'data-testid="user-menu"' in response.text
    # and her account is linked to the provider's subject, an operator, in exactly the mapped teams
    dana = User.objects.get(username="dana")
    assert dana.is_staff is True
    assert dana.is_superuser is False
    assert dana.email == "dana@example.com"
    assert dana.first_name == "Dana"
    assert dana.has_usable_password() is False
    assert OidcIdentity.objects.get(user=dana).subject == "sub-dana"
    assert OidcIdentity.objects.get(user=dana).issuer == oidc_provider.issuer
    assert memberships_of("dana") == {
        "team-a": MembershipRole.TENANT_ADMIN,
        "team-b": MembershipRole.MEMBER,
    }


def test_sso_login_again_applies_groups_removed_at_the_provider(
    live_server: Any, oidc_provider: OidcProvider
) -> None:
    # given erin signed in once as an operator in teams a and b
    TenantFactory(slug="team-a")
    TenantFactory(slug="team-b")
    person = oidc_provider.add_user(
        "erin", PASSWORD, groups=["tessera-operators", "idp-team-a", "idp-team-b"]
    )
    assert sso_login(live_server.url, "erin").status_code == 200
    assert memberships_of("erin") == {"team-a": "member", "team-b": "member"}
    # when the provider drops her from the operators and team-b, makes her ml-leads, and she signs in again
    person.claims["groups"] = ["idp-team-a", "ml-leads"]
    assert sso_login(live_server.url, "erin").status_code == 200
    # then the same user is no operator, out of team-b and tenant admin of team-a (the higher role)
    assert User.objects.filter(username="erin").count() == 1
    erin = User.objects.get(username="erin")
    assert erin.is_staff is False
    assert memberships_of("erin") == {"team-a": MembershipRole.TENANT_ADMIN}
    # and with no groups at all she is in no team
    del person.claims["groups"]
    assert sso_login(live_server.url, "erin").status_code == 200
    assert memberships_of("erin") == {}


def test_sso_login_never_takes_over_a_local_account_with_the_same_username(
    live_server: Any, oidc_provider: OidcProvider
) -> None:
    # given a local account "frank" (member of team-a) and a provider user also called frank
    team_a = TenantFactory(slug="team-a")
    local = UserFactory(username="Frank")
    Membership.objects.create(user=local, tenant=team_a, role=MembershipRole.MEMBER)
    oidc_provider.add_user("frank", PASSWORD, groups=["tessera-operators"])
    # when frank signs in through the provider
    response = sso_login(live_server.url, "frank")
    # then a 400 page says why; no user was created, the local one is untouched and not logged in
    assert response.status_code == 400
    assert "An account named &#x27;frank&#x27; already exists in Tessera" in response.text
    assert 'data-testid="user-menu"' not in response.text
    assert list(User.objects.values_list("username", flat=True)) == ["Frank"]
    local.refresh_from_db()
    assert local.is_staff is False
    assert OidcIdentity.objects.exists() is False
    assert memberships_of("Frank") == {"team-a": "member"}


@pytest.mark.parametrize(
    ("_case", "claims", "expected"),
    [
        (
            "no username",
            {"preferred_username": None},
            "sent no &#x27;preferred_username&#x27; claim",
        ),
        (
            "username too long",
            {"preferred_username": "x" * 151},
            "151 characters long; at most 150",
        ),
        ("username with spaces", {"preferred_username": "a b"}, "is not a usable username"),
        ("groups not a list", {"groups": "tessera-operators"}, "is not a list of group names"),
        ("email not an address", {"email": "nope"}, "is not an e-mail address"),
    ],
)
def test_sso_login_with_a_bad_claim_shows_an_error_page_and_creates_nobody(
    live_server: Any, oidc_provider: OidcProvider, _case: str, claims: dict[str, Any], expected: str
) -> None:
    # given a provider user whose claims are missing or malformed
    oidc_provider.add_user("gina", PASSWORD, **claims)
    # when she signs in
    response = sso_login(live_server.url, "gina")
    # then an error page names the claim (400, not a 500) and nothing was created
    assert response.status_code == 400
    assert expected in response.text
    assert 'data-testid="sso-error"' in response.text
    assert User.objects.exists() is False


def test_sso_callback_with_a_state_this_browser_did_not_start_is_refused(
    live_server: Any, oidc_provider: OidcProvider
) -> None:
    # given a sign-in started in one browser and the provider's answer taken to another that also started one
    oidc_provider.add_user("hana", PASSWORD)
    victim = requests.Session()
    victim.get(f"{live_server.url}/accounts/sso/start/", timeout=10)
    attacker = requests.Session()
    start = attacker.get(f"{live_server.url}/accounts/sso/start/", timeout=10)
    form = provider_form(start)
    form.update(idp_username="hana", idp_password=PASSWORD)
    answer = attacker.post(start.url.split("?")[0], data=form, timeout=10, allow_redirects=False)
    callback = answer.headers["Location"]
    # when the victim's browser is sent to that callback
    response = victim.get(callback, timeout=10)
    # then it is refused (the library's state check) and nobody is logged in or created
    assert response.status_code == 400
    assert "could not be verified" in response.text
    assert User.objects.exists() is False


def test_sso_callback_replayed_after_login_is_refused(
    live_server: Any, oidc_provider: OidcProvider
) -> None:
    # given ines signed in, and the callback URL she came back through
    oidc_provider.add_user("ines", PASSWORD)
    session = requests.Session()
    start = session.get(f"{live_server.url}/accounts/sso/start/", timeout=10)
    form = provider_form(start)
    form.update(idp_username="ines", idp_password=PASSWORD)
    answer = session.post(start.url.split("?")[0], data=form, timeout=10, allow_redirects=False)
    callback = answer.headers["Location"]
    assert session.get(callback, timeout=10).status_code == 200
    # when the same callback is sent again from a fresh browser
    response = requests.get(callback, timeout=10)
    # then it is refused with the error page, not a 500
    assert response.status_code == 400
    assert 'data-testid="sso-error"' in response.text


def test_sso_provider_that_does_not_answer_gives_a_502_page(
    live_server: Any, oidc_provider: OidcProvider, settings: Any
) -> None:
    # given the discovery URL points at a port nobody listens on
    oidc_provider.stop()
    settings.TESSERA_OIDC_DISCOVERY_URL = oidc_provider.issuer
    # when someone starts a sign-in
    response = requests.get(f"{live_server.url}/accounts/sso/start/", timeout=30)
    # then the page says the provider did not answer
    assert response.status_code == 502
    assert "did not answer" in response.text


def test_login_page_offers_single_sign_on_and_local_accounts_still_log_in(
    live_server: Any, oidc_provider: OidcProvider, alice: Any
) -> None:
    # given SSO is configured; when alice opens the login page
    session = requests.Session()
    page = session.get(f"{live_server.url}/accounts/login/", timeout=10)
    # then it offers both the SSO button and the password form
    assert "Log in with Test IdP" in page.text
    assert 'name="password"' in page.text
    # and her local password still logs her in
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token is not None
    response = session.post(
        f"{live_server.url}/accounts/login/",
        data={"username": "alice", "password": DEFAULT_PASSWORD, "csrfmiddlewaretoken": token[1]},
        headers={"Referer": f"{live_server.url}/accounts/login/"},
        timeout=10,
    )
    assert response.url == f"{live_server.url}/"
    assert 'data-testid="welcome"' in response.text


def test_single_sign_on_is_off_when_no_discovery_url_is_set(client: Any, settings: Any) -> None:
    # given no TESSERA_OIDC_DISCOVERY_URL (the default)
    settings.TESSERA_OIDC_DISCOVERY_URL = ""
    # then the login page offers only the password form, and the SSO pages do not exist
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    assert 'data-testid="sso-login"' not in page.content.decode()
    assert client.get("/accounts/sso/start/").status_code == 404
    assert client.get("/accounts/sso/callback/?code=x&state=y").status_code == 404


@pytest.mark.parametrize(
    ("_case", "overrides", "expected"),
    [
        ("nonce of another sign-in", {"nonce": "forged"}, "Nonce verification failed"),
        ("token for another client", {"aud": ["other-client"]}, "issued for another client"),
        ("token from another issuer", {"iss": "http://127.0.0.1:1"}, "issued by another provider"),
        ("token already expired", {"exp": 1_000_000_000}, "Signature has expired"),
        # issue 38: OIDC Core 3.1.3.7, the authorized party
        (
            "several audiences, another authorized party",
            {"aud": [CLIENT_ID, "other-client"], "azp": "other-client"},
            "authorized party",
        ),
        (
            "several audiences, no authorized party",
            {"aud": [CLIENT_ID, "other-client"]},
            "authorized party",
        ),
        ("another authorized party", {"azp": "other-client"}, "authorized party"),
    ],
)
def test_sso_id_token_that_does_not_verify_is_refused(
    live_server: Any,
    oidc_provider: OidcProvider,
    _case: str,
    overrides: dict[str, Any],
    expected: str,
) -> None:
    # given a provider whose id token is wrong in one claim
    oidc_provider.add_user("jo", PASSWORD, groups=["tessera-operators"])
    oidc_provider.id_token_overrides = overrides
    # when jo signs in
    response = sso_login(live_server.url, "jo")
    # then the sign-in is refused with the reason, and nobody was created
    assert response.status_code == 400
    assert "could not be verified" in response.text
    assert expected in response.text
    assert User.objects.exists() is False


def test_sso_id_token_signed_with_a_key_the_jwks_does_not_publish_is_refused(
    live_server: Any, oidc_provider: OidcProvider
) -> None:
    # given a provider that signs with another key under the published key id
    oidc_provider.add_user("jo", PASSWORD)
    oidc_provider.signing_key = RSAKey.generate_key(
        2048, parameters={"kid": KEY_ID, "alg": "RS256", "use": "sig"}
    )
    # when jo signs in; then it is refused and nobody was created
    response = sso_login(live_server.url, "jo")
    assert response.status_code == 400
    assert "could not be verified" in response.text
    assert User.objects.exists() is False


@pytest.mark.parametrize("jwks", [{"no-keys": []}, ["not", "an", "object"], {"keys": [{}]}])
def test_sso_provider_with_a_broken_jwks_document_is_refused_not_a_500(
    live_server: Any, oidc_provider: OidcProvider, jwks: Any
) -> None:
    oidc_provider.add_user("jo", PASSWORD)
    oidc_provider.jwks_override = jwks
    response = sso_login(live_server.url, "jo")
    assert response.status_code == 400
    assert "could not be verified" in response.text
    assert User.objects.exists() is False


def test_sso_id_token_for_several_audiences_with_us_as_authorized_party_signs_in(
    live_server: Any, oidc_provider: OidcProvider
) -> None:
    oidc_provider.add_user("jo", PASSWORD)
    oidc_provider.id_token_overrides = {"aud": [CLIENT_ID, "other-client"], "azp": CLIENT_ID}
    response = sso_login(live_server.url, "jo")
    assert response.status_code == 200, response.text
    assert User.objects.filter(username="jo").exists()


@pytest.mark.parametrize(
    ("_case", "username", "expected"),
    [
        ("mixed script", "\u043eps", "mixes scripts"),
        ("confusable with ops", "\u043e\u0440\u0455", "too much like the existing account"),
    ],
)
def test_sso_login_with_a_look_alike_of_an_existing_username_is_refused_and_logged(
    live_server: Any,
    oidc_provider: OidcProvider,
    caplog: pytest.LogCaptureFixture,
    _case: str,
    username: str,
    expected: str,
) -> None:
    # issue 38: "оps" (Cyrillic о) was created beside the operator "ops"
    UserFactory(username="ops", is_staff=True)
    oidc_provider.add_user("mallory", PASSWORD, preferred_username=username)
    with caplog.at_level("WARNING", logger="portal.sso.views"):
        response = sso_login(live_server.url, "mallory")
    assert response.status_code == 400
    assert expected in response.text
    assert list(User.objects.values_list("username", flat=True)) == ["ops"]
    assert OidcIdentity.objects.exists() is False
    assert any(expected in record.getMessage() for record in caplog.records)


def test_an_operator_removed_at_the_provider_loses_operator_rights_when_the_session_is_too_old(
    live_server: Any, oidc_provider: OidcProvider, settings: Any
) -> None:
    # issue 38: removing a group at the provider never reached the session
    from importlib import import_module

    from portal.sso.roles import SESSION_KEY

    settings.TESSERA_SSO_ROLE_MAX_AGE_SECONDS = 8 * 3600
    person = oidc_provider.add_user("kim", PASSWORD, groups=["tessera-operators"])
    browser = requests.Session()
    assert sso_login(live_server.url, "kim", session=browser).status_code == 200
    assert browser.get(f"{live_server.url}/admin/", timeout=10).url == f"{live_server.url}/admin/"
    # the provider drops kim from the operators; nine hours pass for her session
    person.claims["groups"] = []
    store = import_module(settings.SESSION_ENGINE).SessionStore(
        browser.cookies[settings.SESSION_COOKIE_NAME]
    )
    store[SESSION_KEY] -= 9 * 3600
    store.save()
    # then the session must sign in again, and signing in again applies the provider's groups
    admin = browser.get(f"{live_server.url}/admin/", timeout=10)
    assert admin.url.startswith(f"{live_server.url}/admin/login/")
    assert sso_login(live_server.url, "kim", session=browser).status_code == 200
    assert User.objects.get(username="kim").is_staff is False
