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
    response = client.post(
        "/api/v1/tokens/", {"name": "forever", "expires_at": None}, format="json"
    )
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["expires_at"]
    assert "never expire" in response.json()["error"]["fields"]["expires_at"][0]
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


def _mint(client, name, **body):
    response = client.post("/api/v1/tokens/", {"name": name, **body}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_revoking_a_token_revokes_every_token_minted_through_it(bob, api_as):
    # issue 38: a child minted by a token survived its parent's revocation
    parent = issue_token(bob, name="parent")
    child_client = APIClient()
    child_client.credentials(HTTP_AUTHORIZATION=f"Bearer {parent.raw}")
    child = _mint(child_client, "child")
    grandchild_client = APIClient()
    grandchild_client.credentials(HTTP_AUTHORIZATION=f"Bearer {child['token']}")
    grandchild = _mint(grandchild_client, "grandchild")
    sibling = issue_token(bob, name="sibling")

    response = api_as(bob).post(f"/api/v1/tokens/{parent.token.pk}/revoke/")

    assert response.status_code == 200
    revoked = set(ApiToken.objects.filter(revoked_at__isnull=False).values_list("name", flat=True))
    assert revoked == {"parent", "child", "grandchild"}
    for raw in (child["token"], grandchild["token"]):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        assert client.get("/api/v1/me/").status_code == 401
    sibling_client = APIClient()
    sibling_client.credentials(HTTP_AUTHORIZATION=f"Bearer {sibling.raw}")
    assert sibling_client.get("/api/v1/me/").status_code == 200


def test_a_minted_token_records_the_token_that_minted_it(bob):
    parent = issue_token(bob, name="parent")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {parent.raw}")
    child = _mint(client, "child")
    assert ApiToken.objects.get(pk=child["id"]).parent_id == parent.token.pk
    assert ApiToken.objects.get(pk=parent.token.pk).parent_id is None


@pytest.mark.parametrize("_case", ["service", "api", "page"])
def test_a_new_token_without_an_expiry_gets_the_default_expiry(_case, bob, client, settings):
    settings.TESSERA_TOKEN_DEFAULT_DAYS = 30
    before = timezone.now()
    if _case == "service":
        issue_token(bob, name="t")
    elif _case == "api":
        client.force_login(bob)
        assert client.post("/api/v1/tokens/", {"name": "t"}).status_code == 201
    else:
        client.force_login(bob)
        assert client.post("/account/tokens/", {"name": "t"}).status_code == 302
    expires_at = ApiToken.objects.get(name="t").expires_at
    assert expires_at is not None
    assert before + timedelta(days=30) <= expires_at <= timezone.now() + timedelta(days=30)


def test_a_never_expiring_token_mints_only_tokens_with_the_default_expiry(bob, settings):
    # issue 38: a never-expiring token minted any number of never-expiring ones
    settings.TESSERA_TOKEN_DEFAULT_DAYS = 7
    parent = issue_token(bob, name="old")
    ApiToken.objects.filter(pk=parent.token.pk).update(expires_at=None)  # one made before the fix
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {parent.raw}")
    child = _mint(client, "child")
    expires_at = ApiToken.objects.get(pk=child["id"]).expires_at
    assert expires_at is not None
    assert expires_at <= timezone.now() + timedelta(days=7)
    forever = client.post("/api/v1/tokens/", {"name": "f", "expires_at": None}, format="json")
    assert forever.status_code == 400
    assert list(forever.json()["error"]["fields"]) == ["expires_at"]


def test_a_child_of_a_short_lived_token_gets_its_parents_expiry_not_the_default(bob):
    own_expiry = timezone.now() + timedelta(hours=1)
    client = _api_with_token(bob, expires_at=own_expiry)
    child = _mint(client, "child")
    assert ApiToken.objects.get(pk=child["id"]).expires_at == own_expiry


@pytest.mark.parametrize("_case", ["never", "past-maximum"])
def test_a_non_operator_cannot_create_a_token_past_the_maximum(_case, bob, client, settings):
    settings.TESSERA_TOKEN_MAX_DAYS = 90
    client.force_login(bob)
    body: dict[str, str | None] = {"name": "long"}
    body["expires_at"] = (
        None if _case == "never" else (timezone.now() + timedelta(days=91)).isoformat()
    )
    response = client.post("/api/v1/tokens/", body, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["expires_at"]
    assert "90 days" in response.json()["error"]["fields"]["expires_at"][0]
    assert not ApiToken.objects.filter(name="long").exists()


def test_an_operator_may_create_a_token_that_never_expires_or_outlasts_the_maximum(
    operator, client, settings
):
    settings.TESSERA_TOKEN_MAX_DAYS = 90
    client.force_login(operator)
    never = client.post(
        "/api/v1/tokens/", {"name": "never", "expires_at": None}, content_type="application/json"
    )
    assert never.status_code == 201
    assert ApiToken.objects.get(name="never").expires_at is None
    later = timezone.now() + timedelta(days=400)
    response = client.post(
        "/api/v1/tokens/",
        {"name": "long", "expires_at": later.isoformat()},
        content_type="application/json",
    )
    assert response.status_code == 201
    assert ApiToken.objects.get(name="long").expires_at == later


def test_an_operators_expiring_token_still_cannot_mint_a_child_that_outlives_it(operator):
    client = _api_with_token(operator, expires_at=timezone.now() + timedelta(hours=1))
    response = client.post("/api/v1/tokens/", {"name": "f", "expires_at": None}, format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["expires_at"]


def test_the_token_page_lets_an_operator_create_a_never_expiring_token(operator, bob, client):
    client.force_login(bob)
    response = client.post("/account/tokens/", {"name": "b", "never_expires": "on"})
    assert response.status_code == 200
    assert "Only operators" in response.content.decode()
    assert not ApiToken.objects.filter(name="b").exists()
    client.force_login(operator)
    assert client.post("/account/tokens/", {"name": "o", "never_expires": "on"}).status_code == 302
    assert ApiToken.objects.get(name="o").expires_at is None


def test_the_admin_revoke_action_revokes_the_tokens_minted_through_the_token(bob, operator, client):
    parent = issue_token(bob, name="parent")
    minting = APIClient()
    minting.credentials(HTTP_AUTHORIZATION=f"Bearer {parent.raw}")
    _mint(minting, "child")
    client.force_login(operator)
    response = client.post(
        "/admin/portal/apitoken/",
        {"action": "revoke_selected", "_selected_action": [parent.token.pk]},
    )
    assert response.status_code == 302
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 0
