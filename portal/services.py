"""Domain functions for tenancy and API tokens (the only place that mutates these rows)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from portal.choices import OperatorActionKind, OperatorTargetKind
from portal.models import ApiToken
from portal.operator_log import ActionImpact, record_operator_action
from portal.scoping import is_operator


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    raw: str  # shown once, never stored


def _refuse_expiry(message: str) -> ValidationError:
    return ValidationError({"expires_at": message})


def _expiry_for(
    user: Any, *, expires_at: datetime | None, never_expires: bool, minted_by: ApiToken | None
) -> datetime | None:
    """The expiry of a new token, or None for one that never expires.

    Nothing asked: `TESSERA_TOKEN_DEFAULT_DAYS` from now. Past `TESSERA_TOKEN_MAX_DAYS`, or never:
    operators only. Whoever asks, a token minted by a token expires no later than its parent (an
    omitted expiry is cut to the parent's; an explicit later one is refused), so an expiry bounds
    all the access it leads to."""
    now = timezone.now()
    if never_expires and expires_at is not None:
        raise _refuse_expiry("Give an expiry or ask for a token that never expires, not both.")
    if expires_at is not None and expires_at <= now:
        raise _refuse_expiry("The expiry must be in the future.")
    default_days = settings.TESSERA_TOKEN_DEFAULT_DAYS
    max_days = settings.TESSERA_TOKEN_MAX_DAYS
    if not is_operator(user):
        if never_expires:
            raise _refuse_expiry(
                "Only operators may create tokens that never expire: give an expiry within "
                f"{max_days} days, or none for the default of {default_days} days."
            )
        if expires_at is not None and expires_at > now + timedelta(days=max_days):
            raise _refuse_expiry(
                f"Tokens expire within {max_days} days: give an earlier expiry, or none for the "
                f"default of {default_days} days (only operators may go further)."
            )
    asked = expires_at is not None or never_expires
    expiry = expires_at if asked else now + timedelta(days=default_days)
    bound = None if minted_by is None else minted_by.expires_at
    if bound is not None and (expiry is None or expiry > bound):
        if asked:
            raise _refuse_expiry(
                "A token can only create tokens that expire no later than itself: "
                f"give an expiry no later than {bound.isoformat()}."
            )
        expiry = bound
    return expiry


@transaction.atomic
def issue_token(
    user: Any,
    *,
    name: str,
    expires_at: datetime | None = None,
    never_expires: bool = False,
    minted_by: ApiToken | None = None,
) -> IssuedToken:
    """Create a personal API token for `user`. The raw value is returned once and never stored.

    `expires_at` None and not `never_expires`: the default expiry (see `_expiry_for` for the limits).
    `minted_by`: the token the request authenticated with, when it did (the API); the new token
    records it as its parent and dies with it (`revoke_token`). The parent's row is locked and
    re-read, so a revocation that commits first cannot leave a child minted through it alive.
    Raises ValidationError naming `name` or `expires_at`."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the token a name, e.g. 'ci-pipeline'."})
    if len(name) > 100:
        raise ValidationError({"name": "At most 100 characters."})
    if minted_by is not None:
        minted_by = ApiToken.objects.select_for_update().get(pk=minted_by.pk)
        if not minted_by.is_active:
            raise PermissionDenied("The token this request authenticated with was just revoked.")
    expiry = _expiry_for(
        user, expires_at=expires_at, never_expires=never_expires, minted_by=minted_by
    )
    raw, prefix, key_hash = ApiToken.generate()
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=prefix,
        key_hash=key_hash,
        expires_at=expiry,
        parent=minted_by,
    )
    return IssuedToken(token=token, raw=raw)


def _minted_through(token: ApiToken) -> list[int]:
    """Ids of every token minted through `token`: its children, theirs, and so on (one query per
    generation)."""
    found: list[int] = []
    generation = [token.pk]
    while generation:
        generation = list(
            ApiToken.objects.filter(parent_id__in=generation)
            .exclude(pk__in=found)
            .values_list("pk", flat=True)
        )
        found.extend(generation)
    return found


def token_revoke_impact(token: ApiToken) -> ActionImpact:
    """What revoking `token` does (its confirmation and its audit row say the same)."""
    if token.revoked_at is not None:
        return ActionImpact(summary=f"Token {token} is already revoked; nothing changes.")
    used = (
        f"last used {token.last_used_at:%Y-%m-%d %H:%M} UTC" if token.last_used_at else "never used"
    )
    minted = ApiToken.objects.usable().filter(pk__in=_minted_through(token)).count()
    children = (
        f", and the {minted} token{'s' if minted != 1 else ''} created with it (or with those),"
        if minted
        else ""
    )
    return ActionImpact(
        summary=(
            f"Token {token} ({used}){children} stop{'s' if not minted else ''} working at once: "
            "scripts and CLIs that send it get 401 from now on. This cannot be undone; create a "
            "new token to replace it."
        ),
        done=(
            f"Token {token} ({used}){children} {'was' if not minted else 'were'} revoked: scripts "
            "and CLIs that send it get 401."
        ),
    )


@transaction.atomic
def revoke_token(user: Any, token_id: int, *, actor: Any = None) -> ApiToken:
    """Revoke one of `user`'s tokens and every token minted through it, transitively (idempotent;
    the first revocation is one audit row, by `actor`: the user, or the operator in the admin).
    Locks the token's row, which `issue_token` takes before minting a child through it.
    Raises ApiToken.DoesNotExist for others'."""
    token = ApiToken.objects.select_for_update().get(pk=token_id, user=user)
    if token.revoked_at is None:
        impact = token_revoke_impact(token)
        ApiToken.objects.filter(
            pk__in=[token.pk, *_minted_through(token)], revoked_at__isnull=True
        ).update(revoked_at=timezone.now())
        record_operator_action(
            actor=actor or user,
            action=OperatorActionKind.TOKEN_REVOKE,
            target_kind=OperatorTargetKind.TOKEN,
            target_id=token.pk,
            target_name=str(token),
            impact=impact,
        )
        token.refresh_from_db()
    return token
