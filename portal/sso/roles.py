"""Roles from single sign-on expire: the provider is asked again at least every
`TESSERA_SSO_ROLE_MAX_AGE_SECONDS` (8 hours by default: a working day, so a person removed from the
operators' group at the provider loses operator rights here the same day, while people sign in
through the provider about once a day, which providers usually make a click).

- A browser session made by an SSO login carries when the provider confirmed the roles
  (`SESSION_KEY`, set by `remember_sso_login`); past the max age `SsoRoleMaxAgeMiddleware` signs the
  session out, so the person signs in again and `portal.sso.accounts` applies the groups they have
  now. An operator's session without the stamp (made before this check) is dated by the identity's
  `roles_confirmed_at`; other sessions without it are local logins and are left alone.
- Tokens keep working (scripts must not break each evening), but a token of an SSO user whose roles
  were not confirmed within the max age is not an operator's: `demote_stale_operator` clears
  `is_staff`/`is_superuser` on the request's user object (not in the database) until the person
  signs in again. Tessera keeps no refresh token, so it cannot ask the provider on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse

from portal.models import OidcIdentity

SESSION_KEY = "tessera_sso_roles_confirmed_at"  # epoch seconds; LOCAL: a password login
LOCAL = "local"


def roles_are_current(confirmed_at: float | None, *, now: float | None = None) -> bool:
    """Whether roles the provider confirmed at `confirmed_at` (epoch seconds; None: never) may
    still be honoured."""
    if confirmed_at is None:
        return False
    now = time.time() if now is None else now
    return now - confirmed_at <= settings.TESSERA_SSO_ROLE_MAX_AGE_SECONDS


def _confirmed_at(user: Any) -> float | None | str:
    """When the provider last confirmed `user`'s roles (epoch seconds), None if never, LOCAL for a
    user who does not sign in through the provider (one indexed query)."""
    rows = list(
        OidcIdentity.objects.filter(user_id=user.pk).values_list("roles_confirmed_at", flat=True)
    )
    if not rows:
        return LOCAL
    confirmed: datetime | None = rows[0]
    return None if confirmed is None else confirmed.timestamp()


def remember_sso_roles(user: Any, confirmed_at: float | None) -> None:
    """Leave on `user` what the token lookup read of their roles (epoch seconds, 0 for never, None
    for a user who does not sign in through the provider), so `demote_stale_operator` does not
    query again."""
    user._tessera_sso_roles_confirmed = LOCAL if confirmed_at is None else float(confirmed_at)


def remember_sso_login(request: HttpRequest) -> None:
    """Stamp the session an SSO login just made: its roles were confirmed now."""
    request.session[SESSION_KEY] = time.time()


def demote_stale_operator(user: Any) -> None:
    """A token's user: an SSO operator whose roles are older than the max age acts without operator
    rights for this request (no query when the token lookup read the roles along)."""
    if not (user.is_staff or user.is_superuser):
        return
    confirmed = getattr(user, "_tessera_sso_roles_confirmed", None)
    if confirmed is None:  # not read with the token (a backend without the lookup's extra columns)
        confirmed = _confirmed_at(user)
    if confirmed == LOCAL:
        return
    if not roles_are_current(confirmed if isinstance(confirmed, float) and confirmed else None):
        user.is_staff = False
        user.is_superuser = False


class SsoRoleMaxAgeMiddleware:
    """Signs out an SSO session whose roles are older than `TESSERA_SSO_ROLE_MAX_AGE_SECONDS` (after
    AuthenticationMiddleware and MessageMiddleware); the page then asks for a sign-in as usual."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "_auth_user_id" in request.session:
            self._check(request)
        return self.get_response(request)

    def _check(self, request: HttpRequest) -> None:
        stamp = request.session.get(SESSION_KEY)
        if stamp is None:
            user = request.user
            if not (user.is_authenticated and (user.is_staff or user.is_superuser)):
                return
            stamp = _confirmed_at(user)
            if stamp is None:
                stamp = 0.0  # linked before roles were dated: never confirmed
            request.session[SESSION_KEY] = stamp
        if stamp == LOCAL or roles_are_current(float(stamp)):
            return
        logout(request)
        hours = settings.TESSERA_SSO_ROLE_MAX_AGE_SECONDS / 3600
        messages.info(
            request,
            f"Your single sign-on is more than {hours:g} hours old: sign in again so that "
            "Tessera applies your current groups.",
        )
