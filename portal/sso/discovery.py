"""The provider's endpoints from its discovery document (/.well-known/openid-configuration), fetched
when first needed and kept for an hour per process, never at start-up (a provider that is down must
not stop the portal or local logins)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import requests

from portal.sso.errors import SsoError

CACHE_SECONDS = 3600.0
_REQUIRED = ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri", "userinfo_endpoint")
_MAX_DOCUMENT_BYTES = 256 * 1024


@dataclass(frozen=True)
class ProviderMetadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str


_cache: dict[str, tuple[float, ProviderMetadata]] = {}
_lock = threading.Lock()


def provider_metadata(discovery_url: str, *, timeout_seconds: float) -> ProviderMetadata:
    """The provider's metadata; raises SsoError (502) when it cannot be fetched or lacks an endpoint."""
    now = time.monotonic()
    with _lock:
        cached = _cache.get(discovery_url)
    if cached is not None and now - cached[0] < CACHE_SECONDS:
        return cached[1]
    try:
        response = requests.get(discovery_url, timeout=timeout_seconds)
        response.raise_for_status()
        if len(response.content) > _MAX_DOCUMENT_BYTES:
            raise ValueError("document too large")
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise SsoError(
            f"The sign-in provider did not answer ({type(exc).__name__}); try again later "
            "or log in with a local account.",
            http_status=502,
        ) from exc
    missing = [key for key in _REQUIRED if not isinstance(document, dict) or not document.get(key)]
    if missing:
        raise SsoError(
            f"The sign-in provider's discovery document lacks {', '.join(missing)}.",
            http_status=502,
        )
    metadata = ProviderMetadata(**{key: str(document[key]) for key in _REQUIRED})
    with _lock:
        _cache[discovery_url] = (now, metadata)
    return metadata


def forget_provider_metadata() -> None:
    """Drop the cached documents (tests start a new provider on another port)."""
    with _lock:
        _cache.clear()
