"""`Authorization: Bearer tsr_...` personal-token authentication for DRF."""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from portal.db import Statement, run_together
from portal.models import TOKEN_PREFIX, ApiToken, Membership, OidcIdentity, Tenant, hash_token
from portal.sso.roles import demote_stale_operator, remember_sso_roles

# last_used_at is informational: write it at most once a minute per token, not on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


_TOKEN_FIELDS = [f.attname for f in ApiToken._meta.concrete_fields]
_USER_FIELDS = [f.attname for f in get_user_model()._meta.concrete_fields]


def _tenant_ids_select(vendor: str) -> str | None:
    """SQL of a column with the token user's teams (a correlated subquery on the membership table's
    user index), or None on backends without one: PostgreSQL returns a text array of "id:slug", SQLite
    a comma-separated string of ids (NULL without memberships)."""
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    members = quote(Membership._meta.db_table)
    tokens = quote(ApiToken._meta.db_table)
    if vendor == "postgresql":
        tenants = quote(Tenant._meta.db_table)
        return (
            f"ARRAY(SELECT m.tenant_id::text || ':' || t.slug FROM {members} m "
            f"JOIN {tenants} t ON t.id = m.tenant_id WHERE m.user_id = {tokens}.user_id)"
        )
    if vendor == "sqlite":
        source = f"SELECT m.tenant_id FROM {members} m WHERE m.user_id = {tokens}.user_id"
        return f"(SELECT group_concat(s.tenant_id) FROM ({source}) s)"
    return None


def _sso_roles_select(vendor: str) -> str | None:
    """SQL of a column with when the provider last confirmed the token user's roles, in epoch
    seconds (0: never; NULL: not a single sign-on user), for portal.sso.roles; None on backends
    without one (`_tenant_ids_select` has none there either)."""
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    identities = quote(OidcIdentity._meta.db_table)
    tokens = quote(ApiToken._meta.db_table)
    if vendor == "postgresql":
        epoch = "EXTRACT(EPOCH FROM i.roles_confirmed_at)::float8"
    elif vendor == "sqlite":
        epoch = "(julianday(i.roles_confirmed_at) - 2440587.5) * 86400.0"  # no '%s': a placeholder
    else:
        return None
    return f"(SELECT COALESCE({epoch}, 0) FROM {identities} i WHERE i.user_id = {tokens}.user_id)"


def _token_query(vendor: str) -> Any:
    queryset: Any = ApiToken.objects.select_related("user").order_by()
    select = _tenant_ids_select(vendor)
    roles = _sso_roles_select(vendor)
    if select is not None and roles is not None:
        # extra columns come first in the row, in this order (`_token_with_user` reads them so)
        queryset = queryset.extra(select={"_tenant_ids": select, "_sso_roles_confirmed": roles})
    return queryset


@cache
def _token_sql(alias: str, vendor: str) -> str | None:
    """The SQL of the token-with-user-and-tenant-ids query (`_token_query`) for one database,
    compiled once per process (compiling it cost more CPU than running it, on every API request);
    None where the backend converts column values in Python (SQLite's datetimes): use the ORM there."""
    query = _token_query(vendor).filter(prefix="?")[:1].query
    compiler = query.get_compiler(alias)
    sql, params = compiler.as_sql()
    if list(params) != ["?"] or compiler.get_converters([col for col, _, _ in compiler.select]):
        return None
    return sql


def _remember_teams(user: Any, value: Any) -> None:
    """Leave the user's team ids (and, from PostgreSQL, {slug: id}) where `portal.scoping` reads them,
    so rate limiting, scoping and `tenant_for_request` do not query memberships again."""
    if value is None:
        user._tessera_tenant_ids = set()
    elif isinstance(value, str):
        user._tessera_tenant_ids = {int(part) for part in value.split(",") if part}
    else:
        pairs = [item.split(":", 1) for item in value]
        user._tessera_tenant_ids = {int(tenant_id) for tenant_id, _ in pairs}
        user._tessera_tenant_slugs = {slug: int(tenant_id) for tenant_id, slug in pairs}


def token_statement(raw: str) -> Statement | None:
    """The lookup of a raw bearer token as a statement to send with others (`portal.db.run_together`;
    read its rows with `authenticate_token(raw, rows)`), or None: a malformed token, or a backend
    where the ORM runs the lookup."""
    prefix = _prefix(raw)
    connection = connections[DEFAULT_DB_ALIAS]
    sql = _token_sql(connection.alias, connection.vendor)
    return None if prefix is None or sql is None else (sql, [prefix])


def _prefix(raw: str) -> str | None:
    if not raw.startswith(TOKEN_PREFIX) or raw.count("_") < 2:
        return None
    return raw[len(TOKEN_PREFIX) :].split("_", 1)[0]


def _token_with_user(prefix: str, rows: list[Any] | None = None) -> ApiToken | None:
    """The token with this prefix, its user and the user's tenant ids (one indexed query; prefixes
    are unique), or None. The tenant ids are left where `portal.scoping.tenant_ids_for` caches them,
    so rate limiting and tenant scoping do not read the memberships again. `rows`: the rows of
    `token_statement`, when the caller already ran it."""
    connection = connections[DEFAULT_DB_ALIAS]
    sql = _token_sql(connection.alias, connection.vendor)
    if sql is None:
        token = _token_query(connection.vendor).filter(prefix=prefix).first()
        if token is not None and hasattr(token, "_tenant_ids"):
            _remember_teams(token.user, token._tenant_ids)
            remember_sso_roles(token.user, token._sso_roles_confirmed)
        return token
    if rows is None:
        rows = run_together([(sql, [prefix])])[0]
    if not rows:
        return None
    row = rows[0]
    # extra select columns come first in Django's SELECT list, then the token's, then the user's
    extra = 2 if _tenant_ids_select(connection.vendor) is not None else 0
    split = extra + len(_TOKEN_FIELDS)
    token = ApiToken.from_db(connection.alias, _TOKEN_FIELDS, row[extra:split])
    user: Any = get_user_model().from_db(connection.alias, _USER_FIELDS, row[split:])
    if extra:
        _remember_teams(user, row[0])
        remember_sso_roles(user, row[1])
    token.user = user
    return token


def authenticate_token(raw: str, rows: list[Any] | None = None) -> ApiToken:
    """Return the usable token for a raw value or raise AuthenticationFailed (one message for every
    failure, so a caller cannot tell a revoked token from a wrong one). `rows`: those of
    `token_statement(raw)`, when the caller sent it with other statements."""
    invalid = exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
    prefix = _prefix(raw)
    if prefix is None:
        raise invalid
    token = _token_with_user(prefix, rows)
    if token is None or token.key_hash != hash_token(raw) or not token.is_active:
        raise invalid
    if not token.user.is_active:
        raise invalid
    demote_stale_operator(token.user)
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def remember_token_rows(request: HttpRequest, raw: str, rows: list[Any]) -> None:
    """Leave the rows of `token_statement(raw)` on the request for `BearerTokenAuthentication` (the
    idempotency claim sends the lookup with its own statement: one round trip for both)."""
    request._tessera_token_rows = (raw, rows)  # type: ignore[attr-defined]


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
        looked_up = getattr(request._request, "_tessera_token_rows", None)
        rows = looked_up[1] if looked_up is not None and looked_up[0] == parts[1] else None
        token = authenticate_token(parts[1], rows)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
