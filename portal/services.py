"""Domain functions for tenancy and API tokens (the only place that mutates these rows)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from portal.models import ApiToken


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


def revoke_token(user: Any, token_id: int) -> ApiToken:
    """Revoke one of the user's own tokens (idempotent). Raises ApiToken.DoesNotExist for others'."""
    token = ApiToken.objects.get(pk=token_id, user=user)
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        token.refresh_from_db()
    return token
