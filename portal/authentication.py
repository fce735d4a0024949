"""`Authorization: Bearer tsr_...` personal-token authentication for DRF."""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connections
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from portal.models import TOKEN_PREFIX, ApiToken, hash_token

# last_used_at is informational: write it at most once a minute per token, not on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


_TOKEN_FIELDS = [f.attname for f in ApiToken._meta.concrete_fields]
_USER_FIELDS = [f.attname for f in get_user_model()._meta.concrete_fields]


@cache
def _token_sql(alias: str, vendor: str) -> str | None:
    """The SQL of `ApiToken.objects.select_related("user").filter(prefix=...)` for one database,
    compiled once per process (compiling it cost more CPU than running it, on every API request);
    None where the backend converts column values in Python (SQLite's datetimes): use the ORM there."""
    query = ApiToken.objects.select_related("user").filter(prefix="?").order_by()[:1].query
    compiler = query.get_compiler(alias)
    sql, params = compiler.as_sql()
    if list(params) != ["?"] or compiler.get_converters([col for col, _, _ in compiler.select]):
        return None
    return sql


def _token_with_user(prefix: str) -> ApiToken | None:
    """The token with this prefix and its user (one indexed query; prefixes are unique), or None."""
    connection = connections[DEFAULT_DB_ALIAS]
    sql = _token_sql(connection.alias, connection.vendor)
    if sql is None:
        return ApiToken.objects.select_related("user").filter(prefix=prefix).first()
    with connection.cursor() as cursor:
        cursor.execute(sql, [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    split = len(_TOKEN_FIELDS)
    token = ApiToken.from_db(connection.alias, _TOKEN_FIELDS, row[:split])
    token.user = get_user_model().from_db(connection.alias, _USER_FIELDS, row[split:])
    return token


def authenticate_token(raw: str) -> ApiToken:
    """Return the usable token for a raw value or raise AuthenticationFailed (one message for every
    failure, so a caller cannot tell a revoked token from a wrong one)."""
    invalid = exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
    if not raw.startswith(TOKEN_PREFIX) or raw.count("_") < 2:
        raise invalid
    prefix = raw[len(TOKEN_PREFIX) :].split("_", 1)[0]
    token = _token_with_user(prefix)
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
