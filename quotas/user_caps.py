"""Fairness between the people of a team: the per-person GPU cap of a quota (operators set it).

Admission enforces it (`quotas.admission`, rule 0, code `user_cap`) in the scheduling cycle, which runs
one at a time per group (the shard's transaction-scoped advisory lock), so two cycles can never both
admit the same person past the cap."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F

from portal.errors import Forbidden, InvalidInput
from portal.scoping import is_operator
from quotas.history import record_quota_change
from quotas.models import ChangeAction, Quota

MAX_GPUS_PER_USER = 10_000


def clean_cap(value: Any) -> int | None:
    """Empty/None = no cap; else a whole number of GPUs from 1 to MAX_GPUS_PER_USER."""
    if value in (None, ""):
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _error()
    try:
        number = int(value)
    except ValueError as exc:
        raise _error() from exc
    if not 1 <= number <= MAX_GPUS_PER_USER:
        raise _error()
    return number


def _error() -> InvalidInput:
    message = f"A whole number of GPUs from 1 to {MAX_GPUS_PER_USER} (empty = no cap)."
    return InvalidInput(f"max_gpus_per_user: {message}", fields={"max_gpus_per_user": [message]})


@transaction.atomic
def set_user_cap(quota: Quota | int, max_gpus_per_user: Any, *, actor: Any) -> Quota:
    """Set (or clear) the per-person GPU cap of a quota. Operators only; audited (QuotaChange,
    subject "user_cap"); the group's cycle re-runs after commit."""
    if not is_operator(actor):
        raise Forbidden("Only platform operators set the per-person cap of a quota.")
    cap = clean_cap(max_gpus_per_user)
    quota_id = quota if isinstance(quota, int) else quota.pk
    locked = (
        Quota.objects.select_for_update(of=("self",), no_key=True)
        .select_related("group", "tenant")
        .get(pk=quota_id)
    )
    before = locked.max_gpus_per_user
    Quota.objects.filter(pk=quota_id).update(max_gpus_per_user=cap, version=F("version") + 1)
    locked.refresh_from_db()
    record_quota_change(
        locked,
        subject="user_cap",
        action=ChangeAction.UPDATED,
        actor=actor,
        before={"max_gpus_per_user": before},
        after={"max_gpus_per_user": cap},
        reschedule=True,
    )
    return locked
