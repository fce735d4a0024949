"""Every response under /api/ speaks the API's error body, even the ones Django answers itself.

DRF views already answer `{"error": {...}}` (portal.api.errors). Requests that never reach a view do not: a
URL that matches no route (e.g. `/api/v1/codespaces/0.5/`) gets Django's HTML 404 page, and an unhandled
exception the HTML 500 page. This middleware turns those into JSON with the same shape, so clients and the
CLI can always read `error.code` and `error.message`.

An exception raised by a middleware outside this one (the idempotency middleware when the database
connection died, sessions, authentication) never passes through it: Django answers it with the project's
`handler500` (`portal.views.server_error`), which answers `api_error_response(500)` for /api/ paths.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from portal.api.errors import error_body

_DEFAULTS = {
    400: ("invalid", "Bad request."),
    403: ("forbidden", "You do not have permission to perform this action."),
    404: ("not_found", "Not found."),
    405: ("method_not_allowed", "Method not allowed."),
    500: (
        "server_error",
        "Internal error; it has been logged. Retry later or contact the operators.",
    ),
}


def is_api_path(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def api_error_response(status_code: int) -> JsonResponse:
    """The API error body for a bare HTTP status (no detail of what went wrong, never a traceback)."""
    code, message = _DEFAULTS.get(status_code, ("error", f"HTTP {status_code}."))
    return JsonResponse(error_body(code, message), status=status_code)


class ApiErrorBodyMiddleware:
    """Rewrites non-JSON error responses of /api/ paths into the API error body (same status)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code < 400
            or not is_api_path(request)
            or response.get("Content-Type", "").startswith("application/json")
            or response.streaming
        ):
            return response
        replacement = api_error_response(response.status_code)
        for header in ("Allow", "Retry-After", "WWW-Authenticate"):
            if response.has_header(header):
                replacement[header] = response[header]
        return replacement
