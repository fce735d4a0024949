"""`Idempotency-Key` on every API POST: a retried request returns the first response and creates nothing new.

Applied to the whole API by `IdempotencyMiddleware` (settings.MIDDLEWARE), so no view has to opt in.

How it works (see docs/api.md "Idempotency"):
1. A POST under /api/ with an `Idempotency-Key` header (1-255 printable ASCII characters) from an
   authenticated caller is scoped to the caller (`token:<sha256 of the bearer token>` or `user:<id>` for a
   session), the method and the path.
2. The request runs in ONE transaction: it takes a transaction-scoped advisory lock on the key
   (`pg_try_advisory_xact_lock`, never waiting), reads the key's record, runs the view and INSERTs the
   answer, and commits them together. So a crash leaves either the objects *and* their answer, or
   neither: a killed request's retry gets the original answer, or runs against a clean state.
3. A duplicate:
   - finds the lock held: the first request is still running, in a live transaction (a process that
     dies ends its database session, which releases the lock at once) → 409 `idempotency_in_progress`
     with `Retry-After: 1` (as in the IETF httpapi-idempotency-key draft; we do not hold a worker waiting);
   - finds the stored answer with another request body → 422 `idempotency_key_reused`;
   - finds the stored answer → its status, headers and body, verbatim, plus `Idempotent-Replayed: true`.
4. Responses that did not run the endpoint (401, 403, 429) are not kept; 5xx roll the request's
   transaction back and are not kept: the retry runs. Records expire after `TESSERA_IDEMPOTENCY_TTL_HOURS`
   (pruned by `portal.api.tasks.prune_api_records_task` on beat).

SQLite (development) has no advisory locks; its write transactions (`BEGIN IMMEDIATE`) serialise the
duplicates instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from datetime import timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from portal.api.errors import error_body
from portal.authentication import remember_token_rows, token_statement
from portal.db import Statement, commit_pipelined, run_together
from portal.models import IdempotencyRecord, hash_token
from portal.transactions import session_lost

logger = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_PATTERN = re.compile(r"^[\x21-\x7e]{1,255}$")
# Replayed with the body; hop-by-hop and per-response headers (Date, Vary from middlewares) are not.
KEPT_HEADERS = ("Content-Type", "Location", "ETag", "Retry-After", "Allow", "Content-Language")
NOT_STORED_STATUSES = frozenset({401, 403, 429})
PATH_MAX_LENGTH = IdempotencyRecord._meta.get_field("path").max_length or 500


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


def lock_key(lookup: dict[str, str]) -> int:
    """The key's advisory lock id: 64 bits of the SHA-256 of scope, method, path and key (a collision
    only makes one of two unrelated requests retry after a 409)."""
    parts = (lookup["scope"], lookup["method"], lookup["path"], lookup["key"])
    digest = hashlib.sha256("\0".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@cache
def _record_sql() -> str:
    table = connection.ops.quote_name(IdempotencyRecord._meta.db_table)
    return (
        f"SELECT id, fingerprint, state, status_code, response_headers::text, response_body, "
        f"expires_at FROM {table} WHERE scope = %s AND method = %s AND path = %s AND key = %s"
    )


def _lock_and_read_postgresql(
    request: HttpRequest, lookup: dict[str, str]
) -> tuple[bool, IdempotencyRecord | None]:
    """In the request's transaction: try the key's lock, then read its record (a statement of its
    own, so it sees what a previous holder committed before releasing the lock), the bearer token's
    lookup with them: one round trip (`portal.db.run_together`), authentication then reads its rows.
    Returns (whether the lock is ours, the record)."""
    raw = _bearer(request)
    token_lookup = None if raw is None else token_statement(raw)
    statements: list[Statement] = [
        ("SELECT pg_try_advisory_xact_lock(%s)", [lock_key(lookup)]),
        (_record_sql(), [lookup["scope"], lookup["method"], lookup["path"], lookup["key"]]),
    ]
    rows = run_together(statements + ([token_lookup] if token_lookup else []))
    if raw is not None and token_lookup is not None:
        remember_token_rows(request, raw, rows[2])
    if not rows[1]:
        return bool(rows[0][0][0]), None
    pk, fingerprint, state, status_code, headers, body, expires_at = rows[1][0]
    record = IdempotencyRecord(
        pk=pk,
        **lookup,
        fingerprint=fingerprint,
        state=state,
        status_code=status_code,
        response_headers=json.loads(headers),
        response_body=bytes(body),
        expires_at=expires_at,
    )
    record._state.adding = False
    record._state.db = connection.alias
    return bool(rows[0][0][0]), record


def _enter(
    request: HttpRequest, lookup: dict[str, str], fingerprint: str, now: Any
) -> HttpResponse | None:
    """In the request's transaction: None when this request must run the view (the key is ours and
    has no live answer), else the response to send."""
    if connection.vendor == "postgresql":
        locked, record = _lock_and_read_postgresql(request, lookup)
        if not locked:
            return _error(
                409,
                "idempotency_in_progress",
                "The first request with this Idempotency-Key is still being processed; retry after "
                "a second to get its response.",
                {"Retry-After": "1"},
            )
    else:  # the write transaction (BEGIN IMMEDIATE) is the lock
        record = IdempotencyRecord.objects.filter(**lookup).first()
    if record is None:
        return None
    if record.state == IdempotencyRecord.STATE_COMPLETED and record.expires_at > now:
        if record.fingerprint != fingerprint:
            return _error(
                422,
                "idempotency_key_reused",
                f"This Idempotency-Key was first used with a different request body on "
                f"{request.path}; use a new key for a different request.",
            )
        return _replay(record)
    # Expired but not yet pruned, or a claim an earlier version left behind: the key is ours (we
    # hold its lock), so it is a fresh start.
    IdempotencyRecord.objects.filter(pk=record.pk).delete()
    return None


def _store(lookup: dict[str, str], fingerprint: str, response: HttpResponse, now: Any) -> None:
    """The answer, written in the request's transaction: it commits with what the view wrote. On
    PostgreSQL one plain statement that reads nothing back, so it travels with the COMMIT queued
    behind it (`portal.db.commit_pipelined`)."""
    headers = {name: response[name] for name in KEPT_HEADERS if response.has_header(name)}
    expires_at = now + timedelta(hours=settings.TESSERA_IDEMPOTENCY_TTL_HOURS)
    completed = IdempotencyRecord.STATE_COMPLETED
    body = bytes(response.content)
    if connection.vendor != "postgresql":
        IdempotencyRecord.objects.create(
            **lookup,
            fingerprint=fingerprint,
            state=completed,
            status_code=response.status_code,
            response_headers=headers,
            response_body=body,
            created_at=now,
            expires_at=expires_at,
        )
        return
    params: list[Any] = [lookup["scope"], lookup["method"], lookup["path"], lookup["key"]]
    params.append(fingerprint)
    params += [completed, response.status_code, json.dumps(headers), body, now, expires_at]
    with connection.cursor() as cursor:
        cursor.execute(_store_sql(), params)


@cache
def _store_sql() -> str:
    table = connection.ops.quote_name(IdempotencyRecord._meta.db_table)
    return (
        f"INSERT INTO {table} (scope, method, path, key, fingerprint, state, status_code, "
        "response_headers, response_body, created_at, expires_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s)"
    )


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
        if len(request.path) > PATH_MAX_LENGTH:
            return _error(
                400,
                "invalid",
                f"Idempotency-Key works on paths of at most {PATH_MAX_LENGTH} characters.",
            )
        scope = caller_scope(request)
        if scope is None:
            return self.get_response(request)
        now = timezone.now()
        lookup = {"scope": scope, "method": "POST", "path": request.path, "key": key}
        fingerprint = request_fingerprint(request)
        connection.ensure_connection()
        session = connection.connection
        try:
            response = self._run_once(request, lookup, fingerprint, now)
        except Exception:  # psycopg's own errors too: its pipeline raises them unwrapped
            if not session_lost(session):
                raise
            response = None
        if response is not None and (response.status_code < 500 or not session_lost(session)):
            return response
        # The database ended our session mid-request (a restart, a failover, an operator's
        # pg_terminate_backend): the request's one transaction died with it, or committed with its
        # answer if only the COMMIT's acknowledgement was lost. Either way, running it once more on a
        # new connection gives the original answer: the stored one, or the only creation.
        logger.warning("idempotent POST %s: database session lost, running it again", request.path)
        connection.close()
        return self._run_once(request, lookup, fingerprint, timezone.now())

    def _run_once(
        self, request: HttpRequest, lookup: dict[str, str], fingerprint: str, now: Any
    ) -> HttpResponse:
        # One transaction for the lock, the view's writes and the answer; an exception (a process
        # dying) rolls all of it back. Its COMMIT travels with the answer's INSERT.
        with transaction.atomic():
            early = _enter(request, lookup, fingerprint, now)
            if early is not None:
                return early
            response = self.get_response(request)
            if response.status_code >= 500:
                transaction.set_rollback(True)  # failed: nothing of it stays, the retry runs
            elif not response.streaming and response.status_code not in NOT_STORED_STATUSES:
                with commit_pipelined():
                    _store(lookup, fingerprint, response, now)
        return response


def prune_expired(now: Any = None) -> int:
    """Delete records past their expiry; returns how many."""
    deleted, _ = IdempotencyRecord.objects.filter(expires_at__lte=now or timezone.now()).delete()
    return deleted
