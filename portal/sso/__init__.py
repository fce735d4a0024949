"""Single sign-on with OpenID Connect (mozilla-django-oidc), off unless TESSERA_OIDC_DISCOVERY_URL is set.

config.py reads and checks the settings, discovery.py fetches the provider's endpoints, claims.py turns
the provider's claims into a checked identity (pure), accounts.py finds or creates the user and brings
their operator role and team memberships in line with the groups on every login, backend.py and
views.py plug that into the library's code flow (state, nonce and PKCE are the library's). See
docs/configuration.md, "Single sign-on".
"""
