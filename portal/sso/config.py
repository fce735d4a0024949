"""The single sign-on settings, read once from django.conf.settings and checked (ImproperlyConfigured
names the variable). Settings are read when used, so tests can override them."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

GROUP_MAP_VARIABLE = "TESSERA_OIDC_GROUP_MAP"
# Role names in the map -> portal.choices.MembershipRole values (spelled out: settings.py parses the
# map at start-up, before models may be imported; portal/tests/test_sso_claims.py keeps them equal).
ROLE_NAMES = {"member": "member", "tenant_admin": "tenant_admin", "admin": "tenant_admin"}


@dataclass(frozen=True)
class OidcConfig:
    """What single sign-on needs: where the provider is, who we are to it, and how groups map."""

    discovery_url: str
    client_id: str
    client_secret: str
    scopes: str
    provider_name: str
    username_claim: str
    groups_claim: str
    operator_groups: frozenset[str]
    team_group_prefix: str
    group_map: tuple[tuple[str, str, str], ...]  # (group, team slug, MembershipRole value)
    timeout_seconds: float


def parse_group_map(raw: str) -> tuple[tuple[str, str, str], ...]:
    """'ml-users=ml:member,ml-leads=ml:tenant_admin' -> ((group, slug, role), ...).

    Raises ImproperlyConfigured naming the entry at fault."""
    entries: list[tuple[str, str, str]] = []
    for entry in (item.strip() for item in raw.split(",")):
        if not entry:
            continue
        group, sep, target = entry.partition("=")
        slug, _, role_name = target.partition(":")
        role = ROLE_NAMES.get((role_name or "member").strip())
        if not sep or not group.strip() or not slug.strip() or role is None:
            raise ImproperlyConfigured(
                f"{GROUP_MAP_VARIABLE}: {entry!r} should read group=team-slug[:member|tenant_admin]"
            )
        entries.append((group.strip(), slug.strip(), role))
    return tuple(entries)


def sso_config() -> OidcConfig | None:
    """The single sign-on configuration, or None when it is off (no discovery URL)."""
    discovery_url = settings.TESSERA_OIDC_DISCOVERY_URL
    if not discovery_url:
        return None
    if not settings.TESSERA_OIDC_CLIENT_ID:
        raise ImproperlyConfigured(
            "TESSERA_OIDC_CLIENT_ID is required with TESSERA_OIDC_DISCOVERY_URL"
        )
    if not discovery_url.rstrip("/").endswith("/.well-known/openid-configuration"):
        discovery_url = discovery_url.rstrip("/") + "/.well-known/openid-configuration"
    scopes = settings.TESSERA_OIDC_SCOPES
    if "openid" not in scopes.split():
        raise ImproperlyConfigured(f"TESSERA_OIDC_SCOPES={scopes!r}: must include 'openid'")
    return OidcConfig(
        discovery_url=discovery_url,
        client_id=settings.TESSERA_OIDC_CLIENT_ID,
        client_secret=settings.TESSERA_OIDC_CLIENT_SECRET,
        scopes=scopes,
        provider_name=settings.TESSERA_OIDC_PROVIDER_NAME,
        username_claim=settings.TESSERA_OIDC_USERNAME_CLAIM,
        groups_claim=settings.TESSERA_OIDC_GROUPS_CLAIM,
        operator_groups=frozenset(settings.TESSERA_OIDC_OPERATOR_GROUPS),
        team_group_prefix=settings.TESSERA_OIDC_TEAM_GROUP_PREFIX,
        group_map=parse_group_map(settings.TESSERA_OIDC_GROUP_MAP),
        timeout_seconds=settings.TESSERA_OIDC_TIMEOUT_SECONDS,
    )
