"""One Redis client per URL and process.

Django's Redis cache builds a new `redis.Redis` object (and its table of ~160 response callbacks) for
every operation; on the API's hot paths that cost more CPU than the round trip. Code that talks to
Redis on every request (rate limits, scheduling-trigger deduplication) uses these shared clients.
"""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def redis_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_timeout=2)
