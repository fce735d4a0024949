"""The sign-in through the provider: start (redirect to its login page) and callback (the library's
views, with our settings), and one error page for every way it can fail: a 400 naming what was wrong
with what the provider sent, a 502 when it did not answer; never a 500 and never a half-made user."""

from __future__ import annotations

import logging
from typing import Any

import requests
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from portal.sso.backend import library_setting
from portal.sso.config import sso_config
from portal.sso.errors import SsoError
from portal.sso.roles import remember_sso_login

logger = logging.getLogger(__name__)


def sso_error_page(request: HttpRequest, message: str, *, status: int = 400) -> HttpResponse:
    config = sso_config()
    provider = config.provider_name if config is not None else "single sign-on"
    return render(
        request,
        "registration/sso_error.html",
        {"message": message, "provider_name": provider},
        status=status,
    )


class SsoStartView(OIDCAuthenticationRequestView):
    """GET /accounts/sso/start/?next=...: redirect to the provider's login page."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)  # endpoints: lazily

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return library_setting(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponse:  # type: ignore[override]
        if sso_config() is None:
            raise Http404("Single sign-on is not configured.")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = self.get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT")
            self.OIDC_RP_CLIENT_ID = self.get_settings("OIDC_RP_CLIENT_ID")
            return super().get(request)
        except SsoError as exc:
            return sso_error_page(request, exc.message, status=exc.http_status)


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """GET /accounts/sso/callback/?code=...&state=...: the provider sends the person back here."""

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return library_setting(attr, *args)

    def login_success(self) -> HttpResponse:
        response = super().login_success()
        remember_sso_login(self.request)  # after login(), which may start a new session
        return response

    def login_failure(self) -> HttpResponse:
        error = self.request.GET.get("error", "")[:100]
        if error:
            message = f"The sign-in provider refused the sign-in ({error})."
        elif getattr(self, "user", None) is not None and not self.user.is_active:
            message = "Your Tessera account is disabled; ask an operator."
        else:
            message = (
                "This sign-in link has expired or was already used (or cookies are off). "
                "Start the sign-in again."
            )
        return sso_error_page(self.request, message)

    def get(self, request: HttpRequest) -> HttpResponse:  # type: ignore[override]
        if sso_config() is None:
            raise Http404("Single sign-on is not configured.")
        try:
            return super().get(request)
        except SsoError as exc:
            logger.warning("SSO login refused: %s", exc.message)
            return sso_error_page(request, exc.message, status=exc.http_status)
        except SuspiciousOperation as exc:
            # A state not from this browser's session, a nonce or signature that does not match.
            logger.warning("SSO callback refused: %s", exc)
            return sso_error_page(
                request, f"The sign-in could not be verified ({exc}). Start the sign-in again."
            )
        except requests.RequestException as exc:
            logger.warning("SSO provider call failed: %s", exc)
            status = getattr(exc.response, "status_code", None)
            if status is not None and 400 <= status < 500:
                return sso_error_page(
                    request,
                    "The sign-in provider refused to complete the sign-in (the code was already "
                    "used or has expired). Start the sign-in again.",
                )
            return sso_error_page(
                request,
                "The sign-in provider did not answer; try again later or log in with a local "
                "account.",
                status=502,
            )
