"""A real OpenID Connect provider for tests, built with Authlib's authorization server (Flask binding):
discovery, JWKS, an authorize endpoint with a login form, a token endpoint (client_secret_post or
basic, PKCE S256, single-use codes, nonce) and userinfo behind a bearer-token check; id tokens are
RS256-signed with a key made at start-up. It runs in a thread on a loopback port; a test adds people
(`provider.add_user(...)`) and changes their groups between logins.

Used by portal/sso tests (requests following redirects) and the Playwright SSO test. Not a mock: the
portal talks to it over HTTP exactly as it would to Keycloak or Dex.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from authlib.integrations.flask_oauth2 import AuthorizationServer, ResourceProtector
from authlib.integrations.flask_oauth2 import current_token as flask_current_token
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc6750 import BearerTokenValidator
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from flask import Flask, jsonify, render_template_string, request
from joserfc.jwk import RSAKey
from werkzeug.serving import make_server

CLIENT_ID = "tessera-portal"
CLIENT_SECRET = "tessera-test-secret"  # noqa: S105 - a test provider's fixed client secret
SCOPES = "openid email profile groups"
KEY_ID = "test-key-1"

LOGIN_FORM = """<!doctype html>
<html><head><title>Test IdP login</title></head><body>
<h1>Test identity provider</h1>
{% if error %}<p id="error">{{ error }}</p>{% endif %}
<form method="post" action="/authorize">
  {% for name, value in params %}<input type="hidden" name="{{ name }}" value="{{ value }}">{% endfor %}
  <label>Username <input id="idp-username" name="idp_username"></label>
  <label>Password <input id="idp-password" name="idp_password" type="password"></label>
  <button id="idp-submit" type="submit">Sign in</button>
</form></body></html>"""


@dataclass
class Person:
    """Someone the provider knows: a password and the claims it states about them."""

    password: str
    claims: dict[str, Any]


@dataclass
class Client:
    client_id: str
    client_secret: str
    redirect_uris: list[str]
    scope: str = SCOPES

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str) -> str:
        allowed = set(self.scope.split())
        return " ".join(s for s in scope.split() if s in allowed)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in ("client_secret_post", "client_secret_basic")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class AuthorizationCode:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    username: str
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None


@dataclass
class Token:
    access_token: str
    client_id: str
    scope: str
    username: str
    issued_at: int
    expires_in: int

    def check_client(self, client: Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return self.expires_in

    def is_expired(self) -> bool:
        return time.time() > self.issued_at + self.expires_in

    def is_revoked(self) -> bool:
        return False


class OidcProvider:
    """The provider and its state. `start()` serves it on 127.0.0.1:<free port> in a thread."""

    def __init__(self) -> None:
        self.people: dict[str, Person] = {}
        self.clients: dict[str, Client] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.tokens: dict[str, Token] = {}
        self.lock = threading.Lock()
        self.key = RSAKey.generate_key(
            2048, parameters={"kid": KEY_ID, "alg": "RS256", "use": "sig"}
        )
        # What a misbehaving (or impersonated) provider would do, for the refusal tests: claims put
        # into every id token over the right ones (e.g. {"aud": [...]}, {"nonce": ...}), and another
        # key to sign them with than the one the JWKS publishes.
        self.id_token_overrides: dict[str, Any] = {}
        self.signing_key: RSAKey | None = None
        self.jwks_override: Any = None  # a broken JWKS document to serve instead of the real one
        self.app = Flask("tessera-test-idp")
        self.server = make_server("127.0.0.1", 0, self.app, threaded=True)
        self.issuer = f"http://127.0.0.1:{self.server.server_port}"
        self._thread: threading.Thread | None = None
        self._build()

    # --- what a test sets up -------------------------------------------------------------------
    def register_client(self, redirect_uri: str) -> Client:
        client = Client(CLIENT_ID, CLIENT_SECRET, [redirect_uri])
        self.clients[client.client_id] = client
        return client

    def add_user(self, username: str, password: str, **claims: Any) -> Person:
        """A person; claims default to sub, preferred_username and email from the username. Pass a
        claim as None to leave it out."""
        base: dict[str, Any] = {
            "sub": f"sub-{username}",
            "preferred_username": username,
            "email": f"{username}@example.com",
        }
        base.update(claims)
        person = Person(password, {k: v for k, v in base.items() if v is not None})
        self.people[username] = person
        return person

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def start(self) -> OidcProvider:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- the provider ---------------------------------------------------------------------------
    def _build(self) -> None:
        provider = self
        app = self.app

        class CodeGrant(grants.AuthorizationCodeGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

            def save_authorization_code(self, code: str, req: Any) -> None:
                payload = req.payload
                with provider.lock:
                    provider.codes[code] = AuthorizationCode(
                        code=code,
                        client_id=req.client.client_id,
                        redirect_uri=payload.redirect_uri,
                        scope=req.scope,
                        username=req.user,
                        nonce=payload.data.get("nonce"),
                        code_challenge=payload.data.get("code_challenge"),
                        code_challenge_method=payload.data.get("code_challenge_method"),
                    )

            def query_authorization_code(self, code: str, client: Client) -> Any:
                with provider.lock:
                    found = provider.codes.get(code)
                if found is None or found.client_id != client.client_id:
                    return None
                if time.time() > found.auth_time + 300:
                    return None
                return found

            def delete_authorization_code(self, authorization_code: AuthorizationCode) -> None:
                with provider.lock:
                    provider.codes.pop(authorization_code.code, None)  # single use

            def authenticate_user(self, authorization_code: AuthorizationCode) -> str:
                return authorization_code.username

        class IdToken(OpenIDCode):
            def exists_nonce(self, nonce: str, req: Any) -> bool:
                with provider.lock:
                    return any(c.nonce == nonce for c in provider.codes.values())

            def resolve_client_private_key(self, client: Client) -> Any:
                return provider.signing_key or provider.key

            def get_authorization_code_claims(self, authorization_code: Any) -> dict[str, Any]:
                claims = super().get_authorization_code_claims(authorization_code)
                return {**claims, **provider.id_token_overrides}

            def get_client_algorithm(self, client: Client) -> str:
                return "RS256"

            def get_client_claims(self, client: Client) -> dict[str, Any]:
                return {"iss": provider.issuer, "aud": [client.client_id]}

            def get_encode_header(self, client: Client) -> dict[str, Any]:
                return {"alg": "RS256", "kid": KEY_ID}

            def generate_user_info(self, user: str, scope: str) -> UserInfo:
                return provider._user_info(user)

        def query_client(client_id: str) -> Client | None:
            return provider.clients.get(client_id)

        def save_token(token: dict[str, Any], req: Any) -> None:
            with provider.lock:
                provider.tokens[token["access_token"]] = Token(
                    access_token=token["access_token"],
                    client_id=req.client.client_id,
                    scope=token.get("scope", ""),
                    username=req.user,
                    issued_at=int(time.time()),
                    expires_in=int(token.get("expires_in", 3600)),
                )

        server = AuthorizationServer(app, query_client=query_client, save_token=save_token)
        server.register_grant(
            CodeGrant, [IdToken(require_nonce=True), CodeChallenge(required=False)]
        )

        class Bearer(BearerTokenValidator):
            def authenticate_token(self, token_string: str) -> Token | None:
                with provider.lock:
                    return provider.tokens.get(token_string)

        protect = ResourceProtector()
        protect.register_token_validator(Bearer())

        @app.get("/.well-known/openid-configuration")
        def discovery() -> Any:
            return jsonify(
                {
                    "issuer": provider.issuer,
                    "authorization_endpoint": f"{provider.issuer}/authorize",
                    "token_endpoint": f"{provider.issuer}/token",
                    "userinfo_endpoint": f"{provider.issuer}/userinfo",
                    "jwks_uri": f"{provider.issuer}/jwks",
                    "response_types_supported": ["code"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["RS256"],
                    "scopes_supported": SCOPES.split(),
                    "token_endpoint_auth_methods_supported": [
                        "client_secret_post",
                        "client_secret_basic",
                    ],
                    "code_challenge_methods_supported": ["S256"],
                }
            )

        @app.get("/jwks")
        def jwks() -> Any:
            if provider.jwks_override is not None:
                return jsonify(provider.jwks_override)
            return jsonify({"keys": [provider.key.as_dict(private=False)]})

        @app.route("/authorize", methods=["GET", "POST"])
        def authorize() -> Any:
            params = sorted((k, v) for k, v in request.values.items() if not k.startswith("idp_"))
            if request.method == "GET":
                try:
                    server.get_consent_grant(end_user=None)
                except OAuth2Error as error:
                    return jsonify(dict(error.get_body())), 400
                return render_template_string(LOGIN_FORM, params=params, error=None)
            username = request.form.get("idp_username", "")
            person = provider.people.get(username)
            if person is None or not secrets.compare_digest(
                person.password, request.form.get("idp_password", "")
            ):
                return render_template_string(
                    LOGIN_FORM, params=params, error="Wrong username or password."
                ), 401
            try:
                grant = server.get_consent_grant(end_user=username)
            except OAuth2Error as error:
                return jsonify(dict(error.get_body())), 400
            return server.create_authorization_response(grant_user=username, grant=grant)

        @app.post("/token")
        def token() -> Any:
            return server.create_token_response()

        @app.get("/userinfo")
        @protect("openid")
        def userinfo() -> Any:
            return jsonify(dict(provider._user_info(flask_current_token.username)))

    def _user_info(self, username: str) -> UserInfo:
        return UserInfo(dict(self.people[username].claims))
