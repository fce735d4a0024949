"""Sign-in lockout: too many failed passwords for one username, or from one client address, refuse
further attempts for a cooling-off period, the right password included.

Every attempt is counted *before* the password is checked (one atomic increment per counter), so N
concurrent guesses cannot all slip under the limit; a success then takes its own count back (the
username's counter is cleared, the address's decremented), so the counters hold failures. A counter
lives `TESSERA_LOGIN_FAILURE_WINDOW_SECONDS` from its first attempt; past `TESSERA_LOGIN_MAX_FAILURES`
(per username) or `TESSERA_LOGIN_MAX_FAILURES_PER_ADDRESS` (per address) the key is locked for
`TESSERA_LOGIN_LOCKOUT_SECONDS`. Counters live in the Django cache: Redis (`REDIS_URL`) shares them
across gunicorn workers and pods; the in-process fallback is per process (development).
"""

from __future__ import annotations

import hashlib
import math
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

_PREFIX = "tessera:login"


class LoginRefused(Exception):
    """Sign-in refused without checking the password, for `retry_after` seconds."""

    def __init__(self, retry_after: int) -> None:
        minutes = max(1, math.ceil(retry_after / 60))
        self.retry_after = retry_after
        self.message = (
            "Too many failed sign-ins for this account or from this address. Sign-in is paused: "
            f"try again in {minutes} minute{'s' if minutes != 1 else ''}."
        )
        super().__init__(self.message)


def client_address(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or, behind `TESSERA_TRUSTED_PROXY_COUNT` proxies that
    append to X-Forwarded-For, the entry the outermost trusted proxy added (a client can forge the
    entries before it, not that one)."""
    proxies = settings.TESSERA_TRUSTED_PROXY_COUNT
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [part for part in forwarded if part]
    if proxies and len(forwarded) >= proxies:
        return forwarded[-proxies][:64]
    return str(request.META.get("REMOTE_ADDR", ""))[:64]


def _key(kind: str, value: str) -> str:
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{_PREFIX}:{kind}:{digest}"


def _subjects(username: str, address: str) -> list[tuple[str, int]]:
    return [
        (_key("user", username.strip().casefold()), settings.TESSERA_LOGIN_MAX_FAILURES),
        (_key("address", address), settings.TESSERA_LOGIN_MAX_FAILURES_PER_ADDRESS),
    ]


def admit_attempt(username: str, address: str, *, now: float | None = None) -> None:
    """Count a sign-in attempt for the username and the address, or raise LoginRefused while either
    is locked (or this attempt is one too many: it locks it)."""
    now = time.time() if now is None else now
    lockout = settings.TESSERA_LOGIN_LOCKOUT_SECONDS
    subjects = _subjects(username, address)
    locks = cache.get_many([f"{key}:locked-until" for key, _ in subjects])
    if locks:
        until = max(float(value) for value in locks.values())
        if until > now:
            raise LoginRefused(retry_after=math.ceil(until - now))
    window = settings.TESSERA_LOGIN_FAILURE_WINDOW_SECONDS
    over = False
    for key, limit in subjects:
        cache.add(key, 0, timeout=window)  # the window starts at the first attempt
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr: a new window
            cache.add(key, 1, timeout=window)
            count = 1
        if count > limit:
            cache.set(f"{key}:locked-until", now + lockout, timeout=lockout)
            over = True
    if over:
        raise LoginRefused(retry_after=lockout)


def attempt_succeeded(username: str, address: str) -> None:
    """The password was right: the username's failures are forgiven, the address's count loses this
    attempt (others' failures from the same address still count)."""
    (user_key, _), (address_key, _) = _subjects(username, address)
    cache.delete(user_key)
    try:
        cache.decr(address_key)
    except ValueError:
        pass
