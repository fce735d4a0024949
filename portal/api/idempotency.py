"""`Idempotency-Key` on every API POST: a retried request returns the first response and creates nothing new.

Applied to the whole API by `IdempotencyMiddleware` (settings.MIDDLEWARE), so no view has to opt in.

How it works (see docs/api.md "Idempotency"):
1. A POST under /api/ with an `Idempotency-Key` header (1-255 printable ASCII characters) from an
   authenticated caller is scoped to the caller (`token:<sha256 of the bearer token>` or `user:<id>` for a
   session), the method and the path.
2. The middleware *claims* the key with an INSERT on the unique (scope, method, path, key) constraint
   before the view runs. Of N concurrent duplicates exactly one INSERT succeeds and runs the view.
3. The others read the existing row:
   - another request body under the same key → 422 `idempotency_key_reused`;
   - the first request is still running → 409 `idempotency_in_progress` with `Retry-After: 1` (as in the
     IETF httpapi-idempotency-key draft; we do not hold a worker waiting);
   - the first request has finished → its status, headers and body, verbatim, plus
     `Idempotent-Replayed: true`.
4. Responses that did not run the endpoint (401, 403, 429 and 5xx) are not kept: the claim is released so
   the retry can run. Claims left behind by a crashed process are taken over after
   `TESSERA_IDEMPOTENCY_LOCK_SECONDS`. Records expire after `TESSERA_IDEMPOTENCY_TTL_HOURS`
   (pruned by `portal.api.tasks.prune_api_records_task` on beat).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from datetime import timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from portal.api.errors import error_body
from portal.authentication import remember_token_rows, token_statement
from portal.db import run_together
from portal.models import IdempotencyRecord, hash_token

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_PATTERN = re.compile(r"^[\x21-\x7e]{1,255}$")
# Replayed with the body; hop-by-hop and per-response headers (Date, Vary from middlewares) are not.
KEPT_HEADERS = ("Content-Type", "Location", "ETag", "Retry-After", "Allow", "Content-Language")
NOT_STORED_STATUSES = frozenset({401, 403, 429})


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> HttpResponse:
    fields = {HEADER: [message]}
    response = JsonResponse(error_body(code, message, fields), status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def request_fingerprint(request: HttpRequest) -> str:
    """SHA-256 of the request body; JSON is canonicalised (sorted keys) so key order does not matter."""
    body = request.body
    content_type = request.content_type or ""
    if content_type == "application/json" and body:
        try:
            body = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
        except (ValueError, UnicodeDecodeError):
            pass
    digest = hashlib.sha256()
    digest.update(content_type.encode())
    digest.update(b"\0")
    digest.update(request.META.get("QUERY_STRING", "").encode())
    digest.update(b"\0")
    digest.update(body)
    return digest.hexdigest()


def caller_scope(request: HttpRequest) -> str | None:
    """Who the key belongs to, without a database query for bearer tokens: the token's own hash.

    None for anonymous callers (the API answers them 401 anyway; nothing to remember)."""
    if request.META.get("HTTP_AUTHORIZATION", ""):
        raw = _bearer(request)
        return None if raw is None else f"token:{hash_token(raw)}"
    user = getattr(
        request, "user", None
    )  # the session user (AuthenticationMiddleware runs before us)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return None


def _bearer(request: HttpRequest) -> str | None:
    """The raw bearer token of the request, if it sends one."""
    parts = request.META.get("HTTP_AUTHORIZATION", "").split()
    return parts[1] if len(parts) == 2 and parts[0] == "Bearer" else None


def _replay(record: IdempotencyRecord) -> HttpResponse:
    response = HttpResponse(bytes(record.response_body), status=record.status_code or 200)
    for name, value in (record.response_headers or {}).items():
        response[name] = value
    response[REPLAYED_HEADER] = "true"
    return response


def _claim_postgresql(
    request: HttpRequest, lookup: dict[str, str], fingerprint: str, now: Any, expires: Any
) -> int | None:
    """The claim as ONE autocommitted statement (PostgreSQL, outside any transaction): the INSERT,
    `ON CONFLICT DO NOTHING` on the unique key. Returns the new row's id, or None when the key is
    already claimed. (BEGIN, SET LOCAL, INSERT, COMMIT were four round trips.)

    One WAL flush per request: the statement also switches the session to commits that do not wait
    for the flush, until the stored answer's commit switches it back and waits for it (`_store`; the
    middleware restores the setting on every other way out). WAL is written in order, so when the
    client gets its answer, the claim and everything the view committed are on disk with it; a crash
    before that loses them together and the retry simply runs. Another session may see the view's
    rows in the milliseconds before the flush; whatever it commits after them flushes them first.

    The bearer token's lookup travels with it (`portal.db.run_together`): authentication then reads
    its rows instead of querying again, one round trip for both."""
    table = connection.ops.quote_name(IdempotencyRecord._meta.db_table)
    sql = (
        f"INSERT INTO {table} (scope, method, path, key, fingerprint, state, status_code, "
        "response_headers, response_body, created_at, expires_at) "
        "SELECT %s, %s, %s, %s, %s, %s, NULL, '{}'::jsonb, ''::bytea, %s, %s "
        "FROM (SELECT set_config('synchronous_commit', 'off', false)) AS flush_at_store "
        "ON CONFLICT (scope, method, path, key) DO NOTHING RETURNING id"
    )
    params = [lookup["scope"], lookup["method"], lookup["path"], lookup["key"], fingerprint]
    params += [IdempotencyRecord.STATE_IN_PROGRESS, now, expires]
    raw = _bearer(request)
    token_lookup = None if raw is None else token_statement(raw)
    request._tessera_flush_deferred = True  # type: ignore[attr-defined]
    rows = run_together([(sql, params)] + ([token_lookup] if token_lookup else []))
    if raw is not None and token_lookup is not None:
        remember_token_rows(request, raw, rows[1])
    return int(rows[0][0][0]) if rows[0] else None


def _claim(
    request: HttpRequest, scope: str, key: str, fingerprint: str
) -> tuple[IdempotencyRecord | None, HttpResponse | None]:
    """Insert the claim row. Returns (our claim, None) when this request must run the view, or
    (None, the response to send) when another request owns the key."""
    now = timezone.now()
    lookup = {"scope": scope, "method": request.method or "POST", "path": request.path, "key": key}
    ttl = timedelta(hours=settings.TESSERA_IDEMPOTENCY_TTL_HOURS)
    if not connection.in_atomic_block and connection.vendor == "postgresql":
        claimed = _claim_postgresql(request, lookup, fingerprint, now, now + ttl)
        if claimed is not None:
            record = IdempotencyRecord(
                pk=claimed, **lookup, fingerprint=fingerprint, created_at=now, expires_at=now + ttl
            )
            record._state.adding = False
            record._state.db = connection.alias
            return record, None
    else:
        try:
            with transaction.atomic():
                record = IdempotencyRecord.objects.create(
                    **lookup, fingerprint=fingerprint, created_at=now, expires_at=now + ttl
                )
            return record, None
        except IntegrityError:
            pass
    existing = IdempotencyRecord.objects.filter(**lookup).first()
    if existing is None:
        # The owner released its claim between our INSERT and this read: the caller may retry now.
        return None, _error(
            409,
            "idempotency_in_progress",
            "A request with this Idempotency-Key was just being processed; retry.",
            {"Retry-After": "1"},
        )
    if existing.expires_at <= now:
        # Expired but not yet pruned: take it over as a fresh claim (compare-and-set on its pk + expiry).
        taken = IdempotencyRecord.objects.filter(
            pk=existing.pk, expires_at=existing.expires_at
        ).update(
            fingerprint=fingerprint,
            state=IdempotencyRecord.STATE_IN_PROGRESS,
            status_code=None,
            response_headers={},
            response_body=b"",
            created_at=now,
            expires_at=now + ttl,
        )
        if taken == 1:
            existing.refresh_from_db()
            return existing, None
        existing.refresh_from_db()
    if existing.fingerprint != fingerprint:
        return None, _error(
            422,
            "idempotency_key_reused",
            f"This Idempotency-Key was first used with a different request body on {request.path}; "
            "use a new key for a different request.",
        )
    if existing.state == IdempotencyRecord.STATE_COMPLETED:
        return None, _replay(existing)
    stale_before = now - timedelta(seconds=settings.TESSERA_IDEMPOTENCY_LOCK_SECONDS)
    if existing.created_at < stale_before:
        # The process that claimed it died mid-request: take the claim over (compare-and-set).
        taken = IdempotencyRecord.objects.filter(
            pk=existing.pk,
            state=IdempotencyRecord.STATE_IN_PROGRESS,
            created_at=existing.created_at,
        ).update(created_at=now)
        if taken == 1:
            existing.created_at = now
            return existing, None
    return None, _error(
        409,
        "idempotency_in_progress",
        "The first request with this Idempotency-Key is still being processed; retry after a second "
        "to get its response.",
        {"Retry-After": "1"},
    )


def _store(record: IdempotencyRecord, response: HttpResponse) -> None:
    headers = {name: response[name] for name in KEPT_HEADERS if response.has_header(name)}
    values: dict[str, Any] = {
        "state": IdempotencyRecord.STATE_COMPLETED,
        "status_code": response.status_code,
        "response_headers": headers,
        "response_body": bytes(response.content),
    }
    if connection.vendor != "postgresql":
        IdempotencyRecord.objects.filter(pk=record.pk).update(**values)
        return
    # Every POST stores its answer: one plain statement, not an ORM UPDATE compiled each time.
    values["response_headers"] = json.dumps(headers)
    with connection.cursor() as cursor:
        cursor.execute(_store_sql(), [*values.values(), record.pk])


@cache
def _store_sql() -> str:
    table = connection.ops.quote_name(IdempotencyRecord._meta.db_table)
    # set_config(..., NULL, false) is RESET: the configured commit mode again, for this commit too
    return (
        f"UPDATE {table} SET state = %s, status_code = %s, response_headers = %s::jsonb, "
        "response_body = %s FROM (SELECT set_config('synchronous_commit', NULL, false)) AS durable "
        "WHERE id = %s"
    )


def _restore_commit_mode(request: HttpRequest) -> None:
    """After a request whose claim deferred the WAL flush (`_claim_postgresql`) ended without storing
    an answer: the session's configured commit mode again (RESET)."""
    if getattr(request, "_tessera_flush_deferred", False):
        with connection.cursor() as cursor:
            cursor.execute("RESET synchronous_commit")


class IdempotencyMiddleware:
    """Makes every POST under /api/ idempotent when the client sends `Idempotency-Key`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        key = request.headers.get(HEADER)
        if key is None or request.method != "POST" or not request.path.startswith("/api/"):
            return self.get_response(request)
        if not KEY_PATTERN.match(key):
            return _error(
                400,
                "invalid",
                "Idempotency-Key must be 1 to 255 printable ASCII characters (a UUID is a good choice).",
            )
        scope = caller_scope(request)
        if scope is None:
            return self.get_response(request)
        stored = False
        try:
            record, early = _claim(request, scope, key, request_fingerprint(request))
            if early is not None:
                return early
            assert record is not None
            try:
                response = self.get_response(request)
            except BaseException:
                IdempotencyRecord.objects.filter(pk=record.pk).delete()
                raise
            if (
                response.streaming
                or response.status_code >= 500
                or response.status_code in NOT_STORED_STATUSES
            ):
                IdempotencyRecord.objects.filter(pk=record.pk).delete()
            else:
                _store(record, response)
                stored = True
            return response
        finally:
            if not stored:
                _restore_commit_mode(request)


def prune_expired(now: Any = None) -> int:
    """Delete records past their expiry; returns how many."""
    deleted, _ = IdempotencyRecord.objects.filter(expires_at__lte=now or timezone.now()).delete()
    return deleted
