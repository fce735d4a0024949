"""Personal API tokens: random, hashed, shown once, optional expiry, last use, revocable."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.models import ApiToken, hash_token
from portal.services import issue_token

pytestmark = pytest.mark.django_db


def test_created_token_is_shown_once_and_stored_hashed(bob, api_client):
    api_client.force_authenticate(bob)
    response = api_client.post("/api/v1/tokens/", {"name": "notebook"}, format="json")
    assert response.status_code == 201
    raw = response.json()["token"]
    token = ApiToken.objects.get(user=bob)
    assert token.key_hash == hash_token(raw)
    assert raw not in {token.key_hash, token.prefix, token.name}
    listed = api_client.get("/api/v1/tokens/").json()["results"]
    assert [t["name"] for t in listed] == ["notebook"]
    assert "token" not in listed[0]


def test_bearer_token_authenticates_and_records_last_use(bob, api_client):
    issued = issue_token(bob, name="ci")
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    response = api_client.get("/api/v1/me/")
    assert response.status_code == 200
    assert response.json()["username"] == "bob"
    issued.token.refresh_from_db()
    assert issued.token.last_used_at is not None


@pytest.mark.parametrize("_case", ["revoked", "expired", "wrong-secret", "garbage"])
def test_unusable_tokens_are_refused_with_401(_case, bob, api_client):
    issued = issue_token(bob, name="ci")
    raw = issued.raw
    if _case == "revoked":
        ApiToken.objects.filter(pk=issued.token.pk).update(revoked_at=timezone.now())
    elif _case == "expired":
        ApiToken.objects.filter(pk=issued.token.pk).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
    elif _case == "wrong-secret":
        raw = raw[:-4] + "AAAA"
    else:
        raw = "not-a-token"
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = api_client.get("/api/v1/me/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_revoke_through_api_is_own_tokens_only(bob, charlie, api_as):
    own = issue_token(bob, name="mine").token
    other = issue_token(charlie, name="theirs").token
    client = api_as(bob)
    assert client.post(f"/api/v1/tokens/{other.pk}/revoke/").status_code == 404
    response = client.post(f"/api/v1/tokens/{own.pk}/revoke/")
    assert response.status_code == 200
    assert response.json()["is_active"] is False
    other.refresh_from_db()
    assert other.revoked_at is None


def test_token_with_past_expiry_is_refused_with_field_error(bob, api_client):
    api_client.force_authenticate(bob)
    past = (timezone.now() - timedelta(days=1)).isoformat()
    response = api_client.post("/api/v1/tokens/", {"name": "x", "expires_at": past}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "expires_at": ["The expiry must be in the future."]
    }
    assert ApiToken.objects.count() == 0


def test_token_page_shows_new_token_once_and_revokes(client, bob):
    client.force_login(bob)
    response = client.post("/account/tokens/", {"name": "laptop"}, follow=True)
    raw = response.context["issued_raw"]
    assert raw in response.content.decode()
    page = client.get("/account/tokens/").content.decode()
    assert raw not in page
    assert "laptop" in page
    token = ApiToken.objects.get(user=bob)
    client.post(f"/account/tokens/{token.pk}/revoke/")
    token.refresh_from_db()
    assert token.revoked_at is not None


def _api_with_token(user, expires_at=None):
    client = APIClient()
    issued = issue_token(user, name="short-lived", expires_at=expires_at)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    return client


def test_an_expiring_token_cannot_mint_a_token_that_never_expires(bob):
    client = _api_with_token(bob, expires_at=timezone.now() + timedelta(seconds=40))
    response = client.post("/api/v1/tokens/", {"name": "forever"}, format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["expires_at"]
    assert "no later than" in response.json()["error"]["fields"]["expires_at"][0]
    assert not ApiToken.objects.filter(name="forever").exists()


def test_an_expiring_token_cannot_mint_a_token_that_outlives_it(bob):
    client = _api_with_token(bob, expires_at=timezone.now() + timedelta(seconds=40))
    later = (timezone.now() + timedelta(days=1)).isoformat()
    response = client.post(
        "/api/v1/tokens/", {"name": "longer", "expires_at": later}, format="json"
    )
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["expires_at"]
    assert not ApiToken.objects.filter(name="longer").exists()


def test_an_expiring_token_mints_tokens_that_expire_no_later_than_itself(bob):
    own_expiry = timezone.now() + timedelta(hours=1)
    client = _api_with_token(bob, expires_at=own_expiry)
    sooner = own_expiry - timedelta(minutes=5)
    response = client.post(
        "/api/v1/tokens/", {"name": "sooner", "expires_at": sooner.isoformat()}, format="json"
    )
    assert response.status_code == 201
    assert ApiToken.objects.get(name="sooner").expires_at == sooner
    same = client.post(
        "/api/v1/tokens/", {"name": "same", "expires_at": own_expiry.isoformat()}, format="json"
    )
    assert same.status_code == 201


def test_a_session_user_may_still_create_a_token_that_never_expires(bob, client):
    client.force_login(bob)
    response = client.post("/api/v1/tokens/", {"name": "browser"}, content_type="application/json")
    assert response.status_code == 201
    assert ApiToken.objects.get(name="browser").expires_at is None


def test_reloading_the_tokens_page_after_creating_a_token_creates_no_second_token(client, bob):
    client.force_login(bob)
    response = client.post("/account/tokens/", {"name": "laptop"}, follow=True)
    # the POST answers with a redirect; the redirected GET shows the secret once
    assert response.redirect_chain == [("/account/tokens/", 302)]
    token = ApiToken.objects.get(user=bob, name="laptop")
    page = response.content.decode()
    raw = response.context["issued_raw"]
    assert raw.startswith(f"tsr_{token.prefix}_")
    assert raw in page
    assert token.key_hash == hash_token(raw)
    # a reload is a GET of the page: no second token, and the secret is not shown again
    reloaded = client.get("/account/tokens/").content.decode()
    assert raw not in reloaded
    assert ApiToken.objects.filter(user=bob).count() == 1
