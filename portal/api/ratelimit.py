"""Rate limits per token (or session user) and per tenant, exact under concurrency.

`TokenTenantRateThrottle` is a DRF throttle listed in REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"], so it
applies to every API view after authentication. Each request counts once in a fixed window
(`TESSERA_API_RATE_WINDOW_SECONDS`) against
- its token (`token:<id>`; a session caller counts as `user:<id>`), limit `TESSERA_API_RATE_PER_TOKEN`;
- every tenant the caller is a member of (`tenant:<id>`), limit `TESSERA_API_RATE_PER_TENANT`: a team's
  members and scripts share one budget. Operators without a membership only have the token limit.

The counters are incremented atomically, all buckets in one statement:
`INSERT ... VALUES (...), (...) ON CONFLICT (bucket, window_start) DO UPDATE SET count = count + 1
RETURNING bucket, count` on the database (default), or `INCR` + `EXPIRE` in one Redis pipeline when
`TESSERA_API_RATE_REDIS_URL` is set. A request is admitted when every returned count is within its limit,
so of 200 concurrent requests against a limit of N exactly N pass. Refused requests still count (they
were attempts) and get 429 `rate_limited` with `Retry-After` = seconds to the next window.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from portal.errors import RateLimited
from portal.models import ApiToken, Membership, RateLimitCounter
from portal.redis_clients import redis_client
from portal.scoping import tenant_ids_for


@dataclass(frozen=True)
class Bucket:
    name: str
    limit: int


def _window(now: float, seconds: int) -> tuple[int, int]:
    """(window start as Unix seconds, seconds until the next window, at least 1)."""
    start = int(now // seconds) * seconds
    return start, max(1, math.ceil(start + seconds - now))


def _hit_database(buckets: list[Bucket], window_start: int) -> dict[str, int]:
    table = connection.ops.quote_name(RateLimitCounter._meta.db_table)
    params: list[Any] = []
    for bucket in buckets:
        params += [bucket.name, window_start]
    conflict = (
        f"ON CONFLICT (bucket, window_start) DO UPDATE SET count = {table}.count + 1 "
        "RETURNING bucket, count"
    )
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        # The statement is its own transaction: commit it without waiting for the WAL flush
        # (set_config(..., is_local=true) lasts only for this transaction). A counter lost in a
        # crash only forgives a few requests, and the fsync would otherwise cost every API request
        # ~7 ms on this machine (bench/api.py). Inside an outer transaction we never touch it.
        values = ", ".join(["(%s, %s::bigint)"] * len(buckets))
        sql = (
            f"INSERT INTO {table} (bucket, window_start, count) "
            f"SELECT v.bucket, v.window_start, 1 FROM (VALUES {values}) AS v(bucket, window_start) "
            "CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit "
            f"{conflict}"
        )
    else:
        values = ", ".join(["(%s, %s, 1)"] * len(buckets))
        sql = f"INSERT INTO {table} (bucket, window_start, count) VALUES {values} {conflict}"

    def count() -> dict[str, int]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {row[0]: int(row[1]) for row in cursor.fetchall()}

    try:
        return count()
    except OperationalError:
        # On its own (autocommit), the statement is safe to send again on a new session when the
        # server ended ours (restart, failover, pg_terminate_backend): at worst a request is
        # counted twice. Inside a caller's transaction the caller decides.
        if connection.in_atomic_block or connection.is_usable():
            raise
        connection.close()
        return count()


# Every bucket counted in one round trip and one atomic step: INCR each key, give a new key its expiry.
_HIT_SCRIPT = """
local counts = {}
for i, key in ipairs(KEYS) do
  local count = redis.call('INCR', key)
  if count == 1 then redis.call('EXPIRE', key, ARGV[1]) end
  counts[i] = count
end
return counts
"""


@cache
def _hit_script(url: str) -> Any:
    return redis_client(url).register_script(_HIT_SCRIPT)


def _hit_redis(buckets: list[Bucket], window_start: int, window_seconds: int) -> dict[str, int]:
    keys = [f"tessera:rate:{bucket.name}:{window_start}" for bucket in buckets]
    counts = _hit_script(settings.TESSERA_API_RATE_REDIS_URL)(keys=keys, args=[window_seconds * 2])
    return {bucket.name: int(count) for bucket, count in zip(buckets, counts, strict=True)}


def hit(buckets: list[Bucket], *, now: float | None = None) -> tuple[dict[str, int], int]:
    """Count one request in every bucket; returns ({bucket: count in this window}, retry_after)."""
    window_seconds = settings.TESSERA_API_RATE_WINDOW_SECONDS
    window_start, retry_after = _window(time.time() if now is None else now, window_seconds)
    if settings.TESSERA_API_RATE_REDIS_URL:
        counts = _hit_redis(buckets, window_start, window_seconds)
    else:
        counts = _hit_database(buckets, window_start)
    return counts, retry_after


def _tenant_ids(user: Any) -> set[int]:
    """The user's tenant ids, read with one plain SQL statement (this runs on every API request, and
    the ORM's query compilation cost more than the query) and left in the cache that
    `portal.scoping.tenant_ids_for` reads, so the view's scoping does not query again."""
    cached = getattr(user, "_tessera_tenant_ids", None)
    if cached is not None:
        return set(cached)
    table = connection.ops.quote_name(Membership._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tenant_id FROM {table} WHERE user_id = %s", [user.pk])
        ids = {int(row[0]) for row in cursor.fetchall()}
    user._tessera_tenant_ids = ids
    assert tenant_ids_for(user) == ids  # the scoping module reads the same cache
    return set(ids)


def buckets_for(request: Request) -> list[Bucket]:
    user = request.user
    token = request.auth if isinstance(request.auth, ApiToken) else None
    caller = f"token:{token.pk}" if token is not None else f"user:{user.pk}"
    buckets = [Bucket(caller, settings.TESSERA_API_RATE_PER_TOKEN)]
    buckets += [
        Bucket(f"tenant:{tenant_id}", settings.TESSERA_API_RATE_PER_TENANT)
        for tenant_id in sorted(_tenant_ids(user))
    ]
    return buckets


class TokenTenantRateThrottle(BaseThrottle):
    """Fixed-window limits per token and per tenant; raises 429 `rate_limited` with Retry-After."""

    def allow_request(self, request: Request, view: Any) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return True  # anonymous callers are refused by authentication, not counted
        buckets = buckets_for(request)
        counts, retry_after = hit(buckets)
        over = [bucket for bucket in buckets if counts.get(bucket.name, 0) > bucket.limit]
        if not over:
            return True
        window = settings.TESSERA_API_RATE_WINDOW_SECONDS
        described = ", ".join(
            f"{'this token' if not b.name.startswith('tenant:') else 'your team'} made "
            f"{counts[b.name]} of {b.limit} allowed requests"
            for b in over
        )
        raise RateLimited(
            f"Rate limit reached: {described} in this {window}-second window; "
            f"retry in {retry_after} s.",
            headers={"Retry-After": str(retry_after)},
        )


def prune_old_windows(now: float | None = None) -> int:
    """Delete counters of windows that ended before the current one; returns how many."""
    window_seconds = settings.TESSERA_API_RATE_WINDOW_SECONDS
    window_start, _ = _window(time.time() if now is None else now, window_seconds)
    deleted, _ = RateLimitCounter.objects.filter(window_start__lt=window_start).delete()
    return deleted
