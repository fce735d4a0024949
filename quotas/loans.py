"""Quota loans: a team admin asks a sibling quota for N GPUs of min for a window; the lender's team admin
or an operator approves or declines; the borrower may cancel while it is requested; it expires by
itself at the end of its window. A team admin may also ask the operators (no lender): an operator
approves such a loan from the group's unassigned capacity (its GPUs no quota's min promises, less what
the operators already lend in that window), with the same states and rules.

States and transitions (`quotas.models.LOAN_TRANSITIONS`):

    requested ──approve──► approved ──(ends_at passed)──► expired
        │ ├──decline──► declined
        │ └──cancel───► cancelled
        └──(ends_at passed, never decided)──► expired

Every transition is a compare-and-set on (state, version): two approvers racing, or an approval racing
the expiry task, leave exactly one winner; the loser gets `Conflict` (409) and nothing changes. The
effect of an approved loan is computed from its window by every snapshot
(`quotas.time_inputs.active_loan_effects`, `quotas.usage.apply_time_inputs`), so min goes back to the
lender at `ends_at` even before the expiry task has marked it; the reclaim rules then apply as for any
borrowed work. Every transition is audited (QuotaChange, subject "loan", on both quotas; an operator's
decision also in portal.OperatorAction) and tells both teams' admins (QuotaNotice).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.units import MILLI_PER_GPU
from portal.choices import OperatorActionKind, OperatorTargetKind
from portal.errors import Conflict, Forbidden, InvalidInput
from portal.numbers import counted
from portal.operator_log import ActionImpact, clean_reason, record_operator_action
from portal.periodic import ItemFailures, run_each
from portal.scoping import admin_tenant_ids_for, is_operator, signed_in_or_none
from quotas.history import notify_group_changed, notify_team_admins, record_quota_change
from quotas.models import (
    LOAN_TRANSITIONS,
    MAX_LOAN_DAYS,
    MAX_LOAN_GPUS,
    ChangeAction,
    LoanState,
    Quota,
    QuotaGroup,
    QuotaLoan,
)
from quotas.resources import Side
from quotas.time_inputs import lent_gpus, peak_lent_gpus
from quotas.usage import group_capacity

logger = logging.getLogger(__name__)


def _when(value: Any, name: str) -> datetime:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and len(value) <= 64:
        parsed = parse_datetime(value)
        if parsed is None:
            raise InvalidInput.for_field(
                name, "An ISO 8601 date and time, e.g. 2026-12-07T09:00:00Z."
            )
        moment = parsed
    else:
        raise InvalidInput.for_field(name, "An ISO 8601 date and time, e.g. 2026-12-07T09:00:00Z.")
    if timezone.is_naive(moment):
        raise InvalidInput.for_field(name, "Give a time zone (e.g. a trailing Z for UTC).")
    return moment


def min_gpus(quota: Quota) -> int:
    """Whole GPUs of the quota's own GPU-side min."""
    return quota.min_of(Side.GPU).gpu_milli // MILLI_PER_GPU


def min_below_lent(quota: Quota, now: datetime | None = None) -> str | None:
    """Why `quota`'s (proposed) GPU min is too low for what it lends, or None: its whole GPUs of min
    must cover the most GPUs its approved loans promise at once from now on (a loan moves min from
    lender to borrower for its window, so the lender cannot give back what it has lent)."""
    if not quota.pk:
        return None
    peak = peak_lent_gpus(quota, now or timezone.now())
    if peak is None or min_gpus(quota) >= peak.gpus:
        return None
    return (
        f"{quota.name} lends {peak.gpus} GPUs of its min at once in approved loans, from "
        f"{peak.starts_at.astimezone(UTC):%Y-%m-%d %H:%M} until "
        f"{peak.ends_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC; its GPU min cannot go below "
        f"{peak.gpus} GPUs."
    )


OPERATORS = "the operators"


def _can_speak_for(actor: Any, quota: Quota | None) -> bool:
    """Operators speak for every quota, and alone for the platform (`quota` None: an operators' loan)."""
    if quota is None:
        return is_operator(actor)
    return is_operator(actor) or quota.tenant_id in admin_tenant_ids_for(actor)


def lender_name(loan: QuotaLoan) -> str:
    """The lending quota's name, or "the operators" for a loan from the platform's unassigned capacity."""
    return loan.lender.name if loan.lender is not None else OPERATORS


def unassigned_gpus(
    group: QuotaGroup, starts_at: datetime, ends_at: datetime, *, exclude: int = 0
) -> tuple[int, int, int]:
    """(the group's GPUs, GPUs promised as min, GPUs the operators already lend in the window): what
    an operators' loan may come from is the first less the other two."""
    capacity = group_capacity(group).gpu.gpu_milli // MILLI_PER_GPU
    promised = sum(min_gpus(q) for q in Quota.objects.filter(group=group))
    lent = sum(
        int(loan.gpus)
        for loan in QuotaLoan.objects.filter(
            group=group,
            lender__isnull=True,
            state=LoanState.APPROVED,
            starts_at__lt=ends_at,
            ends_at__gt=starts_at,
        ).exclude(pk=exclude)
    )
    return capacity, promised, lent


def _check_platform_room(
    group: QuotaGroup, gpus: int, starts_at: datetime, ends_at: datetime, exclude: int = 0
) -> None:
    capacity, promised, lent = unassigned_gpus(group, starts_at, ends_at, exclude=exclude)
    free = capacity - promised - lent
    if gpus > free:
        raise InvalidInput.for_field(
            "gpus",
            f"{group.name} has {counted(capacity, 'GPU')}, {promised} promised as min and {lent} already lent "
            f"by the operators in that window: {max(0, free)} unassigned, {gpus} asked.",
        )


def _audit(loan: QuotaLoan, actor: Any, note: str) -> None:
    """One history row on each quota of the loan (its state after the transition)."""
    after = {
        "loan": loan.pk,
        "state": loan.state,
        "gpus": loan.gpus,
        "lender": lender_name(loan),
        "borrower": loan.borrower.name,
        "starts_at": loan.starts_at.isoformat(),
        "ends_at": loan.ends_at.isoformat(),
    }
    for quota in (q for q in (loan.borrower, loan.lender) if q is not None):
        record_quota_change(
            quota,
            subject="loan",
            action=ChangeAction.UPDATED
            if loan.state != LoanState.REQUESTED
            else ChangeAction.CREATED,
            actor=actor,
            before=None,
            after=after,
            version=loan.version,
            note=note,
        )


def _tell_both(loan: QuotaLoan, message: str) -> None:
    for quota in (q for q in (loan.borrower, loan.lender) if q is not None):
        notify_team_admins(quota, f"loan_{loan.state}", message)


def describe(loan: QuotaLoan) -> str:
    return (
        f"loan {loan.pk}: {counted(loan.gpus, 'GPU')} of min from {lender_name(loan)} to {loan.borrower.name}, "
        f"{loan.starts_at:%Y-%m-%d %H:%M} to {loan.ends_at:%Y-%m-%d %H:%M} UTC"
    )


def _check_lender_room(
    lender: Quota, gpus: int, starts_at: datetime, ends_at: datetime, exclude: int = 0
) -> None:
    promised = lent_gpus(lender, starts_at, ends_at, exclude=exclude)
    own = min_gpus(lender)
    if promised + gpus > own:
        raise InvalidInput.for_field(
            "gpus",
            f"{lender.name} has a min of {counted(own, 'GPU')} and already lends {promised} in that window; "
            f"{gpus} more would be {promised + gpus}.",
        )


@transaction.atomic
def request_loan(
    *,
    borrower: Quota,
    lender: Quota | None,
    gpus: Any,
    starts_at: Any,
    ends_at: Any,
    reason: Any = "",
    actor: Any,
) -> QuotaLoan:
    """A team admin of `borrower` (or an operator) asks `lender` (None: the operators, from the group's
    unassigned capacity) for `gpus` GPUs of min for [starts_at, ends_at). InvalidInput naming the field
    for every bad value; nothing written then."""
    if not _can_speak_for(actor, borrower):
        raise Forbidden("Only a team admin of the borrowing team, or an operator, asks for a loan.")
    if lender is not None and lender.group_id != borrower.group_id:
        raise InvalidInput.for_field("lender", "The lender must be a quota of the same group.")
    if lender is not None and lender.pk == borrower.pk:
        raise InvalidInput.for_field("lender", "A quota cannot lend to itself.")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_LOAN_GPUS:
        raise InvalidInput.for_field("gpus", f"A whole number of GPUs from 1 to {MAX_LOAN_GPUS}.")
    start, end = _when(starts_at, "starts_at"), _when(ends_at, "ends_at")
    now = timezone.now()
    if end <= start:
        raise InvalidInput.for_field("ends_at", "Must be after starts_at.")
    if end <= now:
        raise InvalidInput.for_field("ends_at", "Must be in the future.")
    if end - start > timedelta(days=MAX_LOAN_DAYS):
        raise InvalidInput.for_field("ends_at", f"A loan lasts at most {MAX_LOAN_DAYS} days.")
    text = clean_reason(reason, required=False)
    if lender is None:
        _check_platform_room(borrower.group, gpus, start, end)
    else:
        _check_lender_room(lender, gpus, start, end)
    loan = QuotaLoan.objects.create(
        group_id=borrower.group_id,
        lender=lender,
        borrower=borrower,
        gpus=gpus,
        starts_at=start,
        ends_at=end,
        reason=text,
        requested_by=signed_in_or_none(actor),
    )
    loan = QuotaLoan.objects.select_related("group", "lender__tenant", "borrower__tenant").get(
        pk=loan.pk
    )
    _audit(loan, actor, f"requested: {text}" if text else "requested")
    _tell_both(loan, f"Requested {describe(loan)}." + (f" Reason: {text}" if text else ""))
    return loan


def _transition(
    loan: QuotaLoan | int,
    to: str,
    *,
    actor: Any,
    expected_version: int | None = None,
    note: str = "",
) -> QuotaLoan:
    """Compare-and-set the loan from its current state to `to` (Conflict when the transition is not
    allowed or someone moved it first). Locks the lender quota row for an approval (its min is
    checked against the loans it already promised)."""
    loan_id = loan if isinstance(loan, int) else int(loan.pk)
    current = QuotaLoan.objects.select_related("group", "lender__tenant", "borrower__tenant").get(
        pk=loan_id
    )
    if expected_version is not None and int(expected_version) != current.version:
        raise Conflict(
            f"Loan {loan_id} changed since you read it (version {current.version}).",
            code="stale",
        )
    if to not in LOAN_TRANSITIONS[current.state]:
        raise Conflict(
            f"Loan {loan_id} is {current.state}; it cannot become {to}.", code="illegal_transition"
        )
    if to == LoanState.APPROVED and current.lender is None:
        # operators' loans of one group approve one at a time (the group row is their lock)
        QuotaGroup.objects.select_for_update().get(pk=current.group_id)
        _check_platform_room(
            current.group, current.gpus, current.starts_at, current.ends_at, exclude=loan_id
        )
    elif to == LoanState.APPROVED and current.lender is not None:
        Quota.objects.select_for_update(of=("self",), no_key=True).get(pk=current.lender.pk)
        _check_lender_room(
            current.lender, current.gpus, current.starts_at, current.ends_at, exclude=loan_id
        )
    now = timezone.now()
    decided = {"decided_by": signed_in_or_none(actor)}
    if to in (LoanState.APPROVED, LoanState.DECLINED):
        decided.update(decided_at=now, decision_note=note[:500])
    changed = QuotaLoan.objects.filter(
        pk=loan_id, state=current.state, version=current.version
    ).update(state=to, version=F("version") + 1, **decided)
    if not changed:
        raise Conflict(f"Loan {loan_id} was changed by someone else first.", code="stale")
    saved = QuotaLoan.objects.select_related("group", "lender__tenant", "borrower__tenant").get(
        pk=loan_id
    )
    _audit(saved, actor, f"{to}: {note}" if note else str(to))
    notify_group_changed(int(saved.group_id))
    return saved


@transaction.atomic
def decide_loan(
    loan: QuotaLoan | int,
    *,
    approve: bool,
    actor: Any,
    expected_version: int | None = None,
    note: Any = "",
) -> QuotaLoan:
    """The lender's team admin or an operator approves or declines a requested loan. An operator's
    decision is also recorded in the operators' activity log."""
    current = QuotaLoan.objects.select_related("lender").get(
        pk=loan if isinstance(loan, int) else loan.pk
    )
    if not _can_speak_for(actor, current.lender):
        if current.lender is None:
            raise Forbidden("Only an operator decides a loan asked of the operators.")
        raise Forbidden("Only a team admin of the lending team, or an operator, decides a loan.")
    text = clean_reason(note, required=False)
    to = LoanState.APPROVED if approve else LoanState.DECLINED
    saved = _transition(current, to, actor=actor, expected_version=expected_version, note=text)
    verb = "Approved" if approve else "Declined"
    if is_operator(actor):
        record_operator_action(
            actor=actor,
            action=OperatorActionKind.LOAN_APPROVE if approve else OperatorActionKind.LOAN_DECLINE,
            target_kind=OperatorTargetKind.QUOTA,
            target_id=int(saved.borrower_id),
            target_name=f"{saved.group.name}/{saved.borrower.name}",
            impact=ActionImpact(
                summary=f"{verb} {describe(saved)}.",
                teams=tuple(q.tenant.slug for q in (saved.borrower, saved.lender) if q is not None),
                details={"loan": int(saved.pk), "gpus": int(saved.gpus)},
            ),
            reason=text,
        )
    _tell_both(saved, f"{verb} {describe(saved)}." + (f" Note: {text}" if text else ""))
    return saved


@transaction.atomic
def cancel_loan(
    loan: QuotaLoan | int, *, actor: Any, expected_version: int | None = None
) -> QuotaLoan:
    """The borrower's team admin (or an operator) withdraws a loan still requested."""
    current = QuotaLoan.objects.select_related("borrower").get(
        pk=loan if isinstance(loan, int) else loan.pk
    )
    if not _can_speak_for(actor, current.borrower):
        raise Forbidden("Only a team admin of the borrowing team, or an operator, cancels a loan.")
    saved = _transition(
        current, LoanState.CANCELLED, actor=actor, expected_version=expected_version
    )
    _tell_both(saved, f"Cancelled {describe(saved)}.")
    return saved


def _expire_one(loan: QuotaLoan) -> None:
    saved = _transition(loan, LoanState.EXPIRED, actor=None, note="window ended")
    was = "an approved" if loan.state == LoanState.APPROVED else "an undecided"
    _tell_both(
        saved,
        f"Expired {was} {describe(saved)}: the min is back with {lender_name(saved)}; work of "
        f"{saved.borrower.name} beyond its own min is borrowed again and may be reclaimed.",
    )


@dataclass
class ExpiryReport:
    expired: int
    failures: ItemFailures


def expire_loans(now: datetime | None = None) -> ExpiryReport:
    """Mark every requested or approved loan whose window ended as expired (periodic). One loan per
    transaction: a loan that fails (or that someone moved first) is logged and counted, the others
    expire."""
    now = now or timezone.now()
    due = list(
        QuotaLoan.objects.filter(
            state__in=[LoanState.REQUESTED, LoanState.APPROVED], ends_at__lte=now
        ).order_by("id")
    )
    failures = run_each(due, _expire_one, task="loan-expiry", kind="loan")
    return ExpiryReport(expired=failures.done, failures=failures)
