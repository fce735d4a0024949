"""Sign-in throttling: failed passwords lock the (account, address) pair that failed, lock an
address that fails on many accounts, and slow an account down for the addresses that tried it; an
address that did not fail always gets its password checked at once.

- Per (username, address): past `TESSERA_LOGIN_MAX_FAILURES` failures that address is refused for
  that username for `TESSERA_LOGIN_LOCKOUT_SECONDS`, the right password included. The username stays
  open from every other address, so an attacker cannot lock a named account (`ops`) out.
- Per address: past `TESSERA_LOGIN_MAX_FAILURES_PER_ADDRESS` failures (any usernames) the address is
  refused for every username for the lockout period. Other addresses are not affected.
- Per username, across addresses: once its failures reach `TESSERA_LOGIN_MAX_FAILURES`, an address
  that already tried that username waits `account_delay(failures)` seconds (1, 2, 4, ... up to
  `TESSERA_LOGIN_ACCOUNT_MAX_DELAY_SECONDS`) after its previous attempt before the next one: a guesser
  spread over many addresses is slowed down; nobody is locked out, and a first attempt from a new
  address is never delayed.

Every attempt is counted *before* the password is checked (one atomic increment per counter), so N
concurrent guesses cannot all slip under a limit; a success then takes its own count back (the pair's
and the username's counters are cleared, the address's decremented), so the counters hold failures. A
counter lives `TESSERA_LOGIN_FAILURE_WINDOW_SECONDS` from its first attempt. Counters live in the
Django cache: Redis (`REDIS_URL`) shares them across gunicorn workers and pods; the in-process
fallback is per process (development).
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

    def __init__(self, retry_after: int, *, slowed: bool = False) -> None:
        self.retry_after = retry_after
        if slowed:
            self.message = (
                "Too many failed sign-ins for this account: sign-in to it from here is slowed "
                f"down: try again in {retry_after} second{'s' if retry_after != 1 else ''}."
            )
        else:
            minutes = max(1, math.ceil(retry_after / 60))
            self.message = (
                "Too many failed sign-ins for this account from this address, or from this "
                f"address. Sign-in is paused: try again in {minutes} "
                f"minute{'s' if minutes != 1 else ''}."
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


def _subjects(username: str, address: str) -> list[tuple[str, int | None]]:
    """The counters of an attempt, with the limit that locks each: (username, address), address,
    and username (no lock: it sets the delay)."""
    name = username.strip().casefold()
    return [
        (_key("pair", f"{name}\0{address}"), settings.TESSERA_LOGIN_MAX_FAILURES),
        (_key("address", address), settings.TESSERA_LOGIN_MAX_FAILURES_PER_ADDRESS),
        (_key("user", name), None),
    ]


def account_delay(failures: int) -> int:
    """Seconds an address that already tried a username waits between its attempts, for that
    username's `failures` (from any address) in the window: none below `TESSERA_LOGIN_MAX_FAILURES`,
    then doubling from 1 up to `TESSERA_LOGIN_ACCOUNT_MAX_DELAY_SECONDS`."""
    over = failures - settings.TESSERA_LOGIN_MAX_FAILURES
    if over < 0:
        return 0
    return int(min(2 ** min(over, 30), settings.TESSERA_LOGIN_ACCOUNT_MAX_DELAY_SECONDS))


def _count(key: str, window: int) -> int:
    cache.add(key, 0, timeout=window)  # the window starts at the first attempt
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr: a new window
        cache.add(key, 1, timeout=window)
        return 1


def admit_attempt(username: str, address: str, *, now: float | None = None) -> None:
    """Count a sign-in attempt for the username from the address, or raise LoginRefused while the
    pair or the address is locked (or this attempt is one too many: it locks it), or while this
    address must still wait before trying this username again."""
    now = time.time() if now is None else now
    lockout = settings.TESSERA_LOGIN_LOCKOUT_SECONDS
    window = settings.TESSERA_LOGIN_FAILURE_WINDOW_SECONDS
    subjects = _subjects(username, address)
    (pair_key, pair_limit), _, (user_key, _) = subjects
    locks = cache.get_many([f"{key}:locked-until" for key, limit in subjects if limit is not None])
    if locks:
        until = max(float(value) for value in locks.values())
        if until > now:
            raise LoginRefused(retry_after=math.ceil(until - now))
    seen = cache.get_many([pair_key, f"{pair_key}:last", user_key])
    last = seen.get(f"{pair_key}:last")
    delay = account_delay(int(seen.get(user_key) or 0))
    # a pair at its limit is not slowed: this attempt locks it (below), a plainer answer
    at_limit = int(seen.get(pair_key) or 0) >= int(pair_limit or 0)
    if delay and last is not None and not at_limit and now - float(last) < delay:
        raise LoginRefused(retry_after=math.ceil(float(last) + delay - now), slowed=True)
    cache.set(f"{pair_key}:last", now, timeout=window)
    over = False
    for key, limit in subjects:
        count = _count(key, window)
        if limit is not None and count > limit:
            cache.set(f"{key}:locked-until", now + lockout, timeout=lockout)
            over = True
    if over:
        raise LoginRefused(retry_after=lockout)


def attempt_succeeded(username: str, address: str) -> None:
    """The password was right: the pair's and the username's failures are forgiven, the address's
    count loses this attempt (others' failures from the same address still count)."""
    (pair_key, _), (address_key, _), (user_key, _) = _subjects(username, address)
    cache.delete_many([pair_key, f"{pair_key}:last", user_key])
    try:
        cache.decr(address_key)
    except ValueError:
        pass
