"""Puts the user's active tenant (chosen with the tenant switcher, kept in the session) on the request.

Only pages read it (templates' tenant switcher, the pages' defaults). API requests name their team
explicitly, so under /api/ it stays None and costs neither a session load nor a tenants query.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import get_resolver

from portal.api.errors import error_body
from portal.scoping import tenants_for

SESSION_KEY = "active_tenant_id"
API_PREFIX = "/api/"


class ActiveTenantMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.active_tenant = None  # type: ignore[attr-defined]
        if request.path_info.startswith(API_PREFIX):
            return self.get_response(request)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and hasattr(request, "session"):
            wanted = request.session.get(SESSION_KEY)
            tenants = tenants_for(user)
            tenant = tenants.filter(pk=wanted).first() if wanted else None
            if tenant is None:
                tenant = tenants.order_by("slug").first()
            request.active_tenant = tenant  # type: ignore[attr-defined]
        return self.get_response(request)


class RefuseNulInQueryMiddleware:
    """A NUL character in a query-string parameter (name or value) is a 400 naming the parameter, on
    every page and endpoint: PostgreSQL refuses NUL in a query parameter, so it would be a 500 at the
    first lookup (`?tenant=a%00b`) or an anonymous error. The body is the API's error body."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                shown = name.replace("\x00", "\\x00")
                message = "The value contains a NUL character."
                return JsonResponse(
                    error_body("invalid", f"{shown}: {message}", {shown: [message]}), status=400
                )
        return self.get_response(request)


class StyledNotFoundMiddleware:
    """A 404 a view raises (an operator-only page, another team's row) is the styled 404 page even with
    DEBUG on (`make run`): Django's debug 404 would list every URL of the portal to whoever is refused.
    An address that matches no route still gets the debug page in development (that 404 is raised while
    resolving, before any view), and API views answer their own JSON 404."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, Http404):
            return None
        # The project's handler404 (portal.urls), looked up the way Django does, not imported: the
        # views module imports this one.
        handler: Callable[..., HttpResponse] = get_resolver(
            getattr(request, "urlconf", None)
        ).resolve_error_handler(404)
        return handler(request, exception)
