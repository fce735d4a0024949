"""Sign a person in from a checked SSO identity: find the user linked to the provider's subject or
create one, then bring their operator role and team memberships in line with their groups. Runs on
every login, so a person removed from a group at the provider loses what it granted at the next login,
and records when the provider confirmed the roles (`roles_confirmed_at`), after which they lapse
(portal.sso.roles). For SSO users the provider is the source of truth for `is_staff` and memberships.
A new account's username passes the one username rule (portal.usernames)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.utils import timezone

from portal.models import Membership, OidcIdentity, Tenant
from portal.sso.claims import SsoIdentity
from portal.sso.errors import SsoError
from portal.transactions import run_in_transaction
from portal.usernames import check_new_username

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SignIn:
    user: User
    created: bool
    unknown_teams: tuple[str, ...]  # team slugs the groups name that do not exist (ignored)


def _find_or_create_user(identity: SsoIdentity, issuer: str) -> tuple[User, bool]:
    link = OidcIdentity.objects.filter(issuer=issuer, subject=identity.subject).first()
    if link is not None:
        # The row lock serializes two logins of one person (two tabs): memberships are rewritten whole.
        return User.objects.select_for_update().get(pk=link.user_id), False
    if User.objects.filter(username__iexact=identity.username).exists():
        raise SsoError(
            f"An account named '{identity.username}' already exists in Tessera and is not linked "
            "to this sign-in, so it was not used. Log in with its password, or ask an operator."
        )
    try:
        username = check_new_username(identity.username)
    except ValidationError as exc:
        raise SsoError(
            f"{exc.message_dict['username'][0]} This sign-in was refused; ask an operator."
        ) from exc
    user = User(username=username)
    user.set_unusable_password()  # signs in through the provider only
    user.save()
    OidcIdentity.objects.create(user=user, issuer=issuer, subject=identity.subject)
    return user, True


def _sync_memberships(user: User, team_roles: dict[str, str]) -> tuple[str, ...]:
    tenants = {tenant.slug: tenant for tenant in Tenant.objects.filter(slug__in=team_roles)}
    Membership.objects.filter(user=user).exclude(tenant__slug__in=tenants).delete()
    current = {m.tenant_id: m for m in Membership.objects.filter(user=user)}
    for slug, tenant in sorted(tenants.items()):
        role = team_roles[slug]
        membership = current.get(tenant.pk)
        if membership is None:
            Membership.objects.create(user=user, tenant=tenant, role=role)
        elif membership.role != role:
            Membership.objects.filter(pk=membership.pk).update(role=role)
    return tuple(sorted(set(team_roles) - set(tenants)))


def _sign_in_once(identity: SsoIdentity, issuer: str) -> SignIn:
    user, created = _find_or_create_user(identity, issuer)
    user.email = identity.email
    user.first_name = identity.first_name
    user.last_name = identity.last_name
    user.is_staff = identity.is_operator
    user.save(update_fields=["email", "first_name", "last_name", "is_staff"])
    now = timezone.now()
    OidcIdentity.objects.filter(user=user).update(last_login_at=now, roles_confirmed_at=now)
    unknown = _sync_memberships(user, dict(identity.team_roles))
    return SignIn(user=user, created=created, unknown_teams=unknown)


def sign_in_from_identity(identity: SsoIdentity, *, issuer: str) -> SignIn:
    """The user for `identity` (created on first login), with operator role and memberships set from
    the groups, in one transaction. Raises SsoError when the username belongs to another account.

    Locks the user's row (an existing user). Two first logins of one person at once: the second
    loses the unique (issuer, subject) race and runs again, finding the first one's user."""
    for attempt in (1, 2):
        try:
            result = run_in_transaction(
                lambda: _sign_in_once(identity, issuer), name="portal.sso.sign_in"
            )
        except IntegrityError:
            if attempt == 2:
                raise
            continue
        if result.unknown_teams:
            logger.info(
                "SSO login of %s: groups name teams that do not exist, ignored: %s",
                result.user.username,
                ", ".join(result.unknown_teams),
            )
        return result
    raise AssertionError("unreachable")  # pragma: no cover
