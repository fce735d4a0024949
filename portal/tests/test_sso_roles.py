"""Roles from single sign-on expire (issue 38): an SSO session older than
TESSERA_SSO_ROLE_MAX_AGE_SECONDS must sign in again, and a token of an SSO operator whose roles the
provider has not confirmed within that age works without operator rights until they sign in again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.models import OidcIdentity
from portal.services import issue_token
from portal.sso.roles import SESSION_KEY
from portal.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

MAX_AGE = 8 * 3600


def _sso_operator(confirmed_ago: timedelta | None) -> Any:
    user = UserFactory(username="kim", is_staff=True, is_superuser=True)
    OidcIdentity.objects.create(
        user=user,
        issuer="https://idp.example.com",
        subject="sub-kim",
        roles_confirmed_at=None if confirmed_ago is None else timezone.now() - confirmed_ago,
    )
    return user


def _me_with_token(user: Any) -> dict[str, Any]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(user, name='ci').raw}")
    response = client.get("/api/v1/me/")
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize(
    ("_case", "confirmed_ago", "operator"),
    [
        ("confirmed an hour ago", timedelta(hours=1), True),
        ("confirmed nine hours ago", timedelta(hours=9), False),
        ("never confirmed (linked before roles were dated)", None, False),
    ],
)
def test_a_token_of_an_sso_operator_is_an_operator_only_while_the_roles_are_current(
    _case: str, confirmed_ago: timedelta | None, operator: bool, settings: Any
) -> None:
    settings.TESSERA_SSO_ROLE_MAX_AGE_SECONDS = MAX_AGE
    user = _sso_operator(confirmed_ago)
    assert _me_with_token(user)["is_operator"] is operator


def test_a_stale_sso_operator_token_cannot_use_operator_endpoints(settings: Any) -> None:
    settings.TESSERA_SSO_ROLE_MAX_AGE_SECONDS = MAX_AGE
    user = _sso_operator(timedelta(hours=9))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(user, name='ci').raw}")
    assert client.get("/api/v1/operator-actions/").status_code == 403


def test_a_local_operators_token_keeps_operator_rights(operator: Any) -> None:
    assert _me_with_token(operator)["is_operator"] is True


def test_an_sso_session_older_than_the_max_age_is_signed_out(settings: Any) -> None:
    settings.TESSERA_SSO_ROLE_MAX_AGE_SECONDS = MAX_AGE
    user = _sso_operator(timedelta(minutes=1))
    client = Client()
    client.force_login(user)
    session = client.session
    session[SESSION_KEY] = (timezone.now() - timedelta(hours=9)).timestamp()
    session.save()
    response = client.get("/admin/")
    assert response.status_code == 302
    assert response.url.startswith("/admin/login/")
    assert "_auth_user_id" not in client.session


def test_an_sso_session_within_the_max_age_keeps_working(settings: Any) -> None:
    settings.TESSERA_SSO_ROLE_MAX_AGE_SECONDS = MAX_AGE
    user = _sso_operator(timedelta(minutes=1))
    client = Client()
    client.force_login(user)
    session = client.session
    session[SESSION_KEY] = (timezone.now() - timedelta(hours=7)).timestamp()
    session.save()
    assert client.get("/admin/").status_code == 200


def test_an_sso_operator_session_from_before_the_roles_were_dated_must_sign_in_again(
    settings: Any,
) -> None:
    # a session without the stamp (made before this check existed) of an operator whose roles the
    # provider has not confirmed within the age
    settings.TESSERA_SSO_ROLE_MAX_AGE_SECONDS = MAX_AGE
    user = _sso_operator(None)
    client = Client()
    client.force_login(user)
    response = client.get("/admin/")
    assert response.status_code == 302
    assert "_auth_user_id" not in client.session


def test_a_local_operators_session_is_not_affected(operator: Any, settings: Any) -> None:
    settings.TESSERA_SSO_ROLE_MAX_AGE_SECONDS = 1
    client = Client()
    client.force_login(operator)
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/").status_code == 200
