"""The one writer of what a quota change leaves behind, inside the change's transaction:

- the **history** row (`QuotaChange`: who, why, before and after, the version, the warnings shown) of a
  quota, a group, or something of a quota (its budget, loan or per-person cap: `subject`);
- after commit, the **change observers** of the group (`register_quota_change_observer`: scheduling
  re-runs the group's cycle) when the change alters what the group's snapshot reads;
- the **notices** to a quota's team admins (`QuotaNotice`, mailed after commit to those with an address).

Every audited quota service (quotas.services, budgets, loans, user_caps) ends through these functions,
so a history row always names its subject the same way and no service notifies before commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.core.mail import send_mail
from django.db import transaction

from portal.choices import MembershipRole
from portal.models import Membership, Tenant
from portal.scoping import signed_in_or_none
from quotas.models import Quota, QuotaChange, QuotaGroup, QuotaNotice

MAX_NOTE_LENGTH = 500
MAX_NOTICE_LENGTH = 1000

_observers: list[Callable[[int], None]] = []


def register_quota_change_observer(callback: Callable[[int], None]) -> None:
    """`callback(group_id)` runs after commit whenever a quota or group of that group changed."""
    if callback not in _observers:
        _observers.append(callback)


def unregister_quota_change_observer(callback: Callable[[int], None]) -> None:
    """Stop telling `callback` (a no-op when it was not registered)."""
    if callback in _observers:
        _observers.remove(callback)


def notify_group_changed(group_id: int) -> None:
    """Tell the change observers (after commit) that something the group's snapshot reads changed
    (a quota edited, a loan approved or expired, a cap set: scheduling re-runs the group's cycle)."""
    for callback in list(_observers):
        transaction.on_commit(lambda cb=callback: cb(group_id))  # type: ignore[misc]


def record_change(
    *,
    subject: str,
    subject_name: str,
    action: str,
    actor: Any,
    group: QuotaGroup | None,
    quota: Quota | None,
    tenant: Tenant | None,
    before: Any,
    after: Any,
    version: int,
    note: str = "",
    warnings: Sequence[str] = (),
    reschedule: bool = False,
) -> QuotaChange:
    """Write one history row (the note bounded, an anonymous or system actor recorded as none) and,
    with `reschedule` and a group left to schedule, tell the group's observers after commit."""
    change = QuotaChange.objects.create(
        subject=subject,
        subject_name=subject_name,
        action=action,
        actor=signed_in_or_none(actor),
        group=group,
        quota=quota,
        tenant=tenant,
        before=before,
        after=after,
        version=version,
        note=(note or "")[:MAX_NOTE_LENGTH],
        warnings=list(warnings),
    )
    if reschedule and group is not None:
        notify_group_changed(int(group.pk))
    return change


def record_quota_change(
    quota: Quota,
    *,
    subject: str,
    action: str,
    actor: Any,
    before: Any,
    after: Any,
    version: int | None = None,
    note: str = "",
    warnings: Sequence[str] = (),
    reschedule: bool = False,
) -> QuotaChange:
    """A history row of the quota itself or of something of it (`subject`), named "group/quota";
    `version` defaults to the quota's."""
    group = quota.group
    return record_change(
        subject=subject,
        subject_name=f"{group.name}/{quota.name}",
        action=action,
        actor=actor,
        group=group,
        quota=quota,
        tenant=quota.tenant,
        before=before,
        after=after,
        version=quota.version if version is None else version,
        note=note,
        warnings=warnings,
        reschedule=reschedule,
    )


def team_admins(quota: Quota) -> list[Any]:
    """The tenant admins of the quota's tenant, by username."""
    return [
        m.user
        for m in Membership.objects.filter(
            tenant_id=quota.tenant_id, role=MembershipRole.TENANT_ADMIN
        )
        .select_related("user")
        .order_by("user__username")
    ]


def notify_team_admins(quota: Quota, kind: str, message: str) -> QuotaNotice:
    """Record a notice for the quota's team admins and mail those with an address (after commit)."""
    admins = team_admins(quota)
    notice = QuotaNotice.objects.create(
        quota=quota,
        kind=kind,
        message=message[:MAX_NOTICE_LENGTH],
        recipients=[u.get_username() for u in admins],
    )
    addresses = [u.email for u in admins if u.email]
    if addresses:
        subject = f"[Tessera] quota {quota.group.name}/{quota.name}: {kind.replace('_', ' ')}"
        transaction.on_commit(
            lambda: send_mail(subject, message, None, addresses, fail_silently=True)
        )
    return notice
