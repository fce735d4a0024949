"""`Authorization: Bearer tsr_...` personal-token authentication for DRF."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from portal.models import TOKEN_PREFIX, ApiToken, hash_token

# last_used_at is informational: write it at most once a minute per token, not on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def authenticate_token(raw: str) -> ApiToken:
    """Return the usable token for a raw value or raise AuthenticationFailed (one message for every
    failure, so a caller cannot tell a revoked token from a wrong one)."""
    invalid = exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
    if not raw.startswith(TOKEN_PREFIX) or raw.count("_") < 2:
        raise invalid
    prefix = raw[len(TOKEN_PREFIX) :].split("_", 1)[0]
    token = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
    if token is None or token.key_hash != hash_token(raw) or not token.is_active:
        raise invalid
    if not token.user.is_active:
        raise invalid
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        if parts[0] != self.keyword:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        token = authenticate_token(parts[1])
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
