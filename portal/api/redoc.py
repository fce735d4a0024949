"""ReDoc's bundle as the API docs page loads it: drf-spectacular-sidecar's copy, with the one image the
bundle fetches from another host (the Redocly logo on cdn.redoc.ly) pointed at our own icon, so the docs
work on an air-gapped site and tell no third party who reads them."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse
from django.templatetags.static import static
from django.views.decorators.cache import cache_control

BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
CDN_LOGO = b'src:"https://cdn.redoc.ly/redoc/logo-mini.svg"'


@cache
def redoc_bundle(logo_url: str) -> bytes:
    """The sidecar's bundle with the CDN logo replaced by `logo_url` (RuntimeError when the bundle no
    longer has it: an upgrade must be looked at, not served with a new external fetch)."""
    found = finders.find(BUNDLE)
    if not found:
        raise RuntimeError(f"{BUNDLE} is not installed (drf-spectacular-sidecar)")
    script = Path(str(found)).read_bytes()
    if CDN_LOGO not in script:
        raise RuntimeError(
            f"{BUNDLE} no longer loads {CDN_LOGO.decode()}: check it for external URLs"
        )
    return script.replace(CDN_LOGO, b'src:"' + logo_url.encode() + b'"')


@cache_control(max_age=86400, public=True)
def redoc_script(request: HttpRequest, **kwargs: Any) -> HttpResponse:
    return HttpResponse(
        redoc_bundle(static("portal/favicon.svg")), content_type="text/javascript; charset=utf-8"
    )
