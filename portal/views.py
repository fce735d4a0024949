"""Shell pages: login, API tokens, tenant switcher (the home page: dashboards.home_views).
Thin: validate, call a service, render."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import defaults
from django.views.decorators.http import require_http_methods, require_POST

from portal import services
from portal.api.middleware import api_error_response, is_api_path
from portal.forms import TenantSwitchForm, TokenForm
from portal.heartbeat import scheduling_status
from portal.middleware import SESSION_KEY
from portal.models import ApiToken
from portal.scoping import current_user, tenants_for
from portal.sso.config import sso_config

# The raw value of a token just created, kept for the one GET the create redirects to.
ISSUED_TOKEN_SESSION_KEY = "tessera_issued_token"


class LoginView(auth_views.LoginView):
    """The login page: a local account's username and password, and the single sign-on button
    when it is configured (portal.sso)."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        config = sso_config()
        context["sso_provider_name"] = config.provider_name if config is not None else None
        return context


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    """Create a token, then redirect (POST/redirect/GET): reloading the page shows it, creates none.
    The raw value waits in the session for the redirected GET, which shows it once and drops it."""
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            issued = services.issue_token(
                request.user,
                name=form.cleaned_data["name"],
                expires_at=form.cleaned_data["expires_at"],
                never_expires=form.cleaned_data["never_expires"],
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            request.session[ISSUED_TOKEN_SESSION_KEY] = {
                "name": issued.token.name,
                "raw": issued.raw,
            }
            return redirect("tokens")
    issued_token = request.session.pop(ISSUED_TOKEN_SESSION_KEY, None) or {}
    context = {
        "form": form,
        "issued_name": issued_token.get("name"),
        "issued_raw": issued_token.get("raw"),
        "tokens": ApiToken.objects.filter(user=current_user(request)).order_by("-created_at"),
    }
    return render(request, "portal/tokens.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def revoke_token(request: HttpRequest, token_id: int) -> HttpResponse:
    """GET: the confirmation (what stops working). POST: revoke, back to the token list."""
    token = ApiToken.objects.filter(pk=token_id, user=current_user(request)).first()
    if token is None:
        raise Http404("Not found.")
    if request.method == "POST":
        token = services.revoke_token(request.user, token.pk)
        messages.success(request, f"Token “{token.name}” revoked.")
        return redirect("tokens")
    context = {
        "title": f"Revoke token “{token.name}”?",
        "impact": services.token_revoke_impact(token),
        "form": None,
        "button": "Revoke token",
        "danger": True,
        "cancel_url": reverse("tokens"),
    }
    return render(request, "portal/confirm.html", context)


@login_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    form = TenantSwitchForm(request.POST)
    if not form.is_valid():
        raise Http404("Not found.")
    tenant = tenants_for(request.user).filter(pk=form.cleaned_data["tenant"]).first()
    if tenant is None:
        raise Http404("Not found.")
    request.session[SESSION_KEY] = tenant.pk
    messages.info(request, f"Now working in {tenant.name}.")
    target = request.POST.get("next") or reverse("home")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("home")
    return redirect(target)


@require_http_methods(["GET", "HEAD"])
def healthz(request: HttpRequest) -> JsonResponse:
    """/healthz for monitors (no login): 200 while scheduling cycles happen, 503 when none started for
    TESSERA_SCHEDULING_DOWN_AFTER_SECONDS (portal.heartbeat), with the reading and its cause."""
    status = scheduling_status()
    body = {"status": "ok" if status.up else "down", "scheduling": status.as_dict()}
    return JsonResponse(body, status=200 if status.up else 503)


def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, which browsers ask for on pages that name no icon (the admin): our static icon."""
    return redirect(static("portal/favicon.svg"), permanent=True)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: the API's JSON error body on /api/ paths, the styled templates/404.html elsewhere."""
    if is_api_path(request):
        return api_error_response(404)
    return defaults.page_not_found(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler403: JSON on /api/ paths, the styled templates/403.html elsewhere."""
    if is_api_path(request):
        return api_error_response(403)
    return defaults.permission_denied(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: the API's JSON error body on /api/ paths (whichever layer raised), Django's HTML
    page elsewhere. Touches no database: it also answers when the connection is what failed."""
    if is_api_path(request):
        return api_error_response(500)
    return defaults.server_error(request)
