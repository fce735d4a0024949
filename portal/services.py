"""Domain functions for tenancy and API tokens (the only place that mutates these rows)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from portal.choices import OperatorActionKind, OperatorTargetKind
from portal.models import ApiToken
from portal.operator_log import ActionImpact, record_operator_action


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    raw: str  # shown once, never stored


@transaction.atomic
def issue_token(
    user: Any,
    *,
    name: str,
    expires_at: datetime | None = None,
    minted_by: ApiToken | None = None,
) -> IssuedToken:
    """Create a personal API token for `user`. The raw value is returned once and never stored.

    `minted_by`: the token the request authenticated with, when it did (the API). A token can only
    mint tokens that expire no later than itself, so an expiry bounds all access it leads to; a
    session (the browser) may create tokens with any expiry, or none."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the token a name, e.g. 'ci-pipeline'."})
    if len(name) > 100:
        raise ValidationError({"name": "At most 100 characters."})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    bound = None if minted_by is None else minted_by.expires_at
    if bound is not None and (expires_at is None or expires_at > bound):
        raise ValidationError(
            {
                "expires_at": (
                    "A token can only create tokens that expire no later than itself: "
                    f"give an expiry no later than {bound.isoformat()}."
                )
            }
        )
    raw, prefix, key_hash = ApiToken.generate()
    token = ApiToken.objects.create(
        user=user, name=name, prefix=prefix, key_hash=key_hash, expires_at=expires_at
    )
    return IssuedToken(token=token, raw=raw)


def token_revoke_impact(token: ApiToken) -> ActionImpact:
    """What revoking `token` does (its confirmation and its audit row say the same)."""
    if token.revoked_at is not None:
        return ActionImpact(summary=f"Token {token} is already revoked; nothing changes.")
    used = (
        f"last used {token.last_used_at:%Y-%m-%d %H:%M} UTC" if token.last_used_at else "never used"
    )
    return ActionImpact(
        summary=(
            f"Token {token} ({used}) stops working at once: scripts and CLIs that send it get "
            "401 from now on. This cannot be undone; create a new token to replace it."
        ),
        done=f"Token {token} ({used}) was revoked: scripts and CLIs that send it get 401.",
    )


@transaction.atomic
def revoke_token(user: Any, token_id: int) -> ApiToken:
    """Revoke one of the user's own tokens (idempotent; the first revocation is one audit row).
    Raises ApiToken.DoesNotExist for others'."""
    token = ApiToken.objects.select_for_update().get(pk=token_id, user=user)
    if token.revoked_at is None:
        impact = token_revoke_impact(token)
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        record_operator_action(
            actor=user,
            action=OperatorActionKind.TOKEN_REVOKE,
            target_kind=OperatorTargetKind.TOKEN,
            target_id=token.pk,
            target_name=str(token),
            impact=impact,
        )
        token.refresh_from_db()
    return token
