"""The provider's claims turned into a checked identity: pure, no database (portal.sso.accounts
applies it). Every claim has a bound; one missing or malformed claim refuses the whole sign-in with
a message that names it."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from portal.choices import MembershipRole
from portal.models import dns_label_validator
from portal.sso.config import OidcConfig
from portal.sso.errors import SsoError

MAX_USERNAME_LENGTH = 150  # django.contrib.auth User.username
MAX_SUBJECT_LENGTH = 255  # OidcIdentity.subject
MAX_EMAIL_LENGTH = 254
MAX_NAME_LENGTH = 150  # User.first_name / last_name
MAX_GROUPS = 500
MAX_GROUP_LENGTH = 255
_ROLE_RANK = {MembershipRole.MEMBER.value: 0, MembershipRole.TENANT_ADMIN.value: 1}


@dataclass(frozen=True)
class SsoIdentity:
    """Who signed in, as the provider says, checked: the account to find or create and what the
    groups grant (operator, and a role per team slug)."""

    subject: str
    username: str
    email: str
    first_name: str
    last_name: str
    is_operator: bool
    team_roles: tuple[tuple[str, str], ...]  # (team slug, MembershipRole value), sorted by slug


def _text(claims: Mapping[str, Any], name: str, *, required: bool, limit: int) -> str:
    value = claims.get(name)
    if value is None or value == "":
        if required:
            raise SsoError(f"The sign-in provider sent no '{name}' claim, which Tessera needs.")
        return ""
    if not isinstance(value, str):
        raise SsoError(f"The sign-in provider's '{name}' claim is not text.")
    value = value.strip()
    if required and not value:
        raise SsoError(f"The sign-in provider's '{name}' claim is empty.")
    if len(value) > limit:
        raise SsoError(
            f"The sign-in provider's '{name}' claim is {len(value)} characters long; "
            f"at most {limit} are allowed."
        )
    return value


def _groups(claims: Mapping[str, Any], name: str) -> list[str]:
    value = claims.get(name)
    if value is None:
        return []  # providers leave the claim out for a person in no group
    if not isinstance(value, list) or not all(isinstance(group, str) for group in value):
        raise SsoError(f"The sign-in provider's '{name}' claim is not a list of group names.")
    if len(value) > MAX_GROUPS:
        raise SsoError(
            f"The sign-in provider's '{name}' claim lists {len(value)} groups; at most {MAX_GROUPS}."
        )
    too_long = [group for group in value if len(group) > MAX_GROUP_LENGTH]
    if too_long:
        raise SsoError(
            f"The sign-in provider's '{name}' claim has a group name longer than "
            f"{MAX_GROUP_LENGTH} characters."
        )
    return value


def _is_team_slug(text: str) -> bool:
    try:
        dns_label_validator(text)
    except ValidationError:
        return False
    return True


def roles_from_groups(groups: list[str], config: OidcConfig) -> tuple[bool, dict[str, str]]:
    """(operator?, {team slug: role}) granted by `groups`: a group in TESSERA_OIDC_OPERATOR_GROUPS
    makes an operator; TESSERA_OIDC_GROUP_MAP maps a group to a team and role; a group named
    `<prefix><slug>` (prefix `team-` by default) makes a member of that team. Two groups for one team:
    the higher role (tenant admin over member)."""
    is_operator = any(group in config.operator_groups for group in groups)
    roles: dict[str, str] = {}

    def grant(slug: str, role: str) -> None:
        if _ROLE_RANK[role] >= _ROLE_RANK.get(roles.get(slug, role), 0):
            roles[slug] = role

    mapped = {group: (slug, role) for group, slug, role in config.group_map}
    prefix = config.team_group_prefix
    for group in groups:
        if group in mapped:
            grant(*mapped[group])
        elif prefix and group.startswith(prefix) and _is_team_slug(group[len(prefix) :]):
            grant(group[len(prefix) :], MembershipRole.MEMBER.value)
    return is_operator, roles


def identity_from_claims(claims: Mapping[str, Any], config: OidcConfig) -> SsoIdentity:
    """Check the claims and say who signed in; raises SsoError naming the claim at fault."""
    subject = _text(claims, "sub", required=True, limit=MAX_SUBJECT_LENGTH)
    username = unicodedata.normalize(
        "NFKC", _text(claims, config.username_claim, required=True, limit=MAX_USERNAME_LENGTH)
    )
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError as exc:
        raise SsoError(
            f"The sign-in provider's '{config.username_claim}' claim ({username!r}) is not a "
            "usable username: letters, digits and @ . + - _ only."
        ) from exc
    email = _text(claims, "email", required=False, limit=MAX_EMAIL_LENGTH)
    if email:
        try:
            validate_email(email)
        except ValidationError as exc:
            raise SsoError(
                "The sign-in provider's 'email' claim is not an e-mail address."
            ) from exc
    first_name = _text(claims, "given_name", required=False, limit=10_000)[:MAX_NAME_LENGTH]
    last_name = _text(claims, "family_name", required=False, limit=10_000)[:MAX_NAME_LENGTH]
    is_operator, roles = roles_from_groups(_groups(claims, config.groups_claim), config)
    return SsoIdentity(
        subject=subject,
        username=username,
        email=email,
        first_name=first_name,
        last_name=last_name,
        is_operator=is_operator,
        team_roles=tuple(sorted(roles.items())),
    )
