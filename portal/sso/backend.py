"""The library's OIDC backend, fed from the discovery document and our settings, with the user found
by the provider's subject (portal.sso.accounts) instead of by e-mail. The library checks the state,
the nonce, PKCE and the id token's RS256 signature against the provider's JWKS; this class also
checks the token's issuer, audience and authorized party (azp), which the library leaves out."""

from __future__ import annotations

from typing import Any

import jwt
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from portal.sso.accounts import sign_in_from_identity
from portal.sso.claims import identity_from_claims
from portal.sso.config import OidcConfig, sso_config
from portal.sso.discovery import ProviderMetadata, provider_metadata
from portal.sso.errors import SsoError

SIGN_ALGORITHM = "RS256"


def library_setting(name: str, *default: Any) -> Any:
    """The mozilla-django-oidc setting `name`, from our configuration (portal.sso.config) and the
    provider's discovery document; anything else from django.conf.settings."""
    config = sso_config()
    if config is not None:
        if name == "OIDC_RP_CLIENT_ID":
            return config.client_id
        if name == "OIDC_RP_CLIENT_SECRET":
            return config.client_secret
        if name == "OIDC_RP_SCOPES":
            return config.scopes
        if name == "OIDC_TIMEOUT":
            return config.timeout_seconds
        if name == "OIDC_RP_SIGN_ALGO":
            return SIGN_ALGORITHM
        endpoints = {
            "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
            "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
            "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
            "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
        }
        if name in endpoints:
            return getattr(metadata(config), endpoints[name])
    return import_from_settings(name, *default)


def metadata(config: OidcConfig) -> ProviderMetadata:
    return provider_metadata(config.discovery_url, timeout_seconds=config.timeout_seconds)


class TesseraOidcBackend(OIDCAuthenticationBackend):
    """Authenticates the OIDC code flow's callback (and nothing else: a password login passes by)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django builds every backend for every authenticate() call, local password logins included:
        # the library reads its endpoints here, so this one reads them lazily (see the properties).
        self.UserModel = get_user_model()
        self.OIDC_RP_IDP_SIGN_KEY = None

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return library_setting(attr, *args)

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:  # noqa: N802 - the library's attribute names
        return str(self.get_settings("OIDC_OP_TOKEN_ENDPOINT"))

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:  # noqa: N802
        return str(self.get_settings("OIDC_OP_USER_ENDPOINT"))

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:  # noqa: N802
        return str(self.get_settings("OIDC_OP_JWKS_ENDPOINT"))

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:  # noqa: N802
        return str(self.get_settings("OIDC_RP_CLIENT_ID"))

    @property
    def OIDC_RP_CLIENT_SECRET(self) -> str:  # noqa: N802
        return str(self.get_settings("OIDC_RP_CLIENT_SECRET"))

    @property
    def OIDC_RP_SIGN_ALGO(self) -> str:  # noqa: N802
        return SIGN_ALGORITHM

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        if sso_config() is None or request is None or "nonce" not in kwargs:
            return None  # not the OIDC callback (a password login, or SSO is off)
        return super().authenticate(request, **kwargs)

    def verify_token(self, token: str, **kwargs: Any) -> Any:
        try:
            payload = super().verify_token(token, **kwargs)
        except (jwt.PyJWTError, KeyError, TypeError, ValueError) as exc:
            # The library turns only a bad signature into SuspiciousOperation; an expired or
            # not-yet-valid token (pyjwt checks exp, nbf, iat), or a JWKS document without the
            # fields it reads, would otherwise be a 500.
            raise SuspiciousOperation(f"The id token is not valid: {exc!s}.") from exc
        config = sso_config()
        assert config is not None  # authenticate() returned early otherwise
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if payload.get("iss") != metadata(config).issuer:
            raise SuspiciousOperation("The id token was issued by another provider.")
        if config.client_id not in audiences:
            raise SuspiciousOperation("The id token was issued for another client.")
        # OIDC Core 3.1.3.7: with several audiences the authorized party must be named, and when
        # named it must be us; else a token another client obtained (listing us too) would sign in.
        authorized_party = payload.get("azp")
        if len(audiences) > 1 and authorized_party is None:
            raise SuspiciousOperation(
                "The id token names several audiences but no authorized party (azp)."
            )
        if authorized_party is not None and authorized_party != config.client_id:
            raise SuspiciousOperation("The id token's authorized party (azp) is another client.")
        return payload

    def get_or_create_user(self, access_token: str, id_token: str, payload: Any) -> Any:
        config = sso_config()
        assert config is not None
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict):
            raise SsoError("The sign-in provider's user information is not a JSON object.")
        if userinfo.get("sub") != payload.get("sub"):
            # OIDC Core 5.3.2: the userinfo response must be about the id token's subject.
            raise SsoError("The sign-in provider's user information is about another person.")
        # The id token's claims fill what userinfo leaves out (some providers put groups only there).
        claims = {**payload, **userinfo}
        identity = identity_from_claims(claims, config)
        return sign_in_from_identity(identity, issuer=metadata(config).issuer).user
