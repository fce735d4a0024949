"""Polite reclaim in the cycle: apply `quotas.reclaim_notices.plan_notices` in the cycle's transaction.

The decide step chooses the reclaim victims (pure, `scheduling.services.decide`); the cycle then reads
the group's live notices and `plan_notices` (pure) says which victims get a notice, which notices are
due (their victims are stopped now: job pods requeued, codespaces suspended: released with their home
kept, restartable, the owner told) and which are cancelled because nothing needs the capacity any more.
With `reclaim_notice_seconds == 0` and no live notice this is today's immediate reclaim, unchanged.

After commit: each new notice is delivered by a task (`deliver_reclaim_notice`: the backend signal and
the quota's checkpoint webhook, outcomes recorded, never blocking the cycle), a cancelled one clears the
signal, and codespace owners are told through the workload observer `RECLAIM_NOTICE_OBSERVER`.
Stopping victims survives one bad row: each victim is stopped in its own savepoint, a failure is logged
and its notice stays live (the next cycle tries again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from quotas.models import DeliveryState, QuotaGroup, ReclaimNotice, ReclaimNoticeState
from quotas.reclaim import Victim
from quotas.reclaim_notices import (
    VictimWorkload,
    call_checkpoint_hook,
    countdown_message,
    give_notices,
    live_notices,
    plan_notices,
    record_delivery,
    transition,
)
from scheduling import observers
from scheduling.backends.base import Backend, BackendError
from scheduling.choices import ACTIVE_STATES
from scheduling.followups import followups
from scheduling.models import Placement, Workload
from scheduling.services.decide import Reclaim, Waiting
from scheduling.services.workloads import backend_name

logger = logging.getLogger(__name__)

RECLAIM_NOTICE_OBSERVER = "codespace_reclaim_notice"
"""Observer kind: called with codespace workload ids whose notice was given, executed or cancelled."""

CANCEL_NOTE = "The pressure went away: no reclaim is needed any more."
EXECUTE_NOTE = "The notice ran out: stopped."


@dataclass(frozen=True)
class PoliteOutcome:
    """What polite reclaim did in one cycle: the workloads stopped, the notices given, executed and
    cancelled (ids), and the claimants' waiting reasons while a countdown runs."""

    reclaimed: list[int] = field(default_factory=list)
    given: list[int] = field(default_factory=list)
    executed: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    waiting: Mapping[int, Waiting] = field(default_factory=dict)


StopVictims = Callable[[QuotaGroup, Reclaim], list[int]]


def _stop_each(
    group: QuotaGroup, claim: Reclaim, victims: Sequence[Victim], stop: StopVictims
) -> tuple[list[int], set[int]]:
    """Stop each victim in its own savepoint; returns (the workloads stopped, the failed victims'
    workload ids)."""
    stopped: list[int] = []
    failed: set[int] = set()
    for victim in victims:
        try:
            with transaction.atomic():
                stopped.extend(stop(group, Reclaim(claim.claimant_ids, claim.message, (victim,))))
        except Exception:  # noqa: BLE001  (one bad victim must not stop the cycle; logged, retried)
            logger.exception("polite reclaim: stopping %s in group %s failed", victim.name, group)
            failed.update(victim.workload_ids)
    return stopped, failed


def reclaim_politely(
    group: QuotaGroup,
    claim: Reclaim | None,
    waiting: Mapping[int, Waiting],
    *,
    now: datetime,
    stop: StopVictims,
) -> PoliteOutcome:
    """Apply the cycle's reclaim `claim` (None: no reclaim is needed now) politely; see the module
    docstring. Runs inside the cycle's transaction, under the shard's lock."""
    live = live_notices(group.pk)
    if not live and (claim is None or group.reclaim_notice_seconds == 0):
        return PoliteOutcome(reclaimed=stop(group, claim) if claim is not None else [])
    victims = claim.victims if claim is not None else ()
    plan = plan_notices(victims, live, now=now, notice_seconds=group.reclaim_notice_seconds)
    cancelled = transition(plan.cancel, ReclaimNoticeState.CANCELLED, now=now, note=CANCEL_NOTE)
    reclaimed: list[int] = []
    executed: list[int] = []
    given: list[ReclaimNotice] = []
    if claim is not None:
        reclaimed, failed = _stop_each(group, claim, plan.stop_now, stop)
        due = {n.notice_id for n in live if n.workload_id not in failed}
        executed = transition(
            [i for i in plan.execute if i in due],
            ReclaimNoticeState.EXECUTED,
            now=now,
            note=EXECUTE_NOTE,
        )
        given = give_notices(
            group,
            plan.give,
            _victim_workloads([n.workload_id for n in plan.give]),
            claimant_ids=claim.claimant_ids,
            claimant_quota_id=_quota_of(claim.claimant_ids),
            reason=claim.message,
            now=now,
        )
    _after_commit(given, cancelled, executed)
    return PoliteOutcome(
        reclaimed=reclaimed,
        given=[n.pk for n in given],
        executed=executed,
        cancelled=cancelled,
        waiting=_countdown(claim, waiting, group.pk, now) if claim is not None else {},
    )


def _victim_workloads(workload_ids: Sequence[int]) -> dict[int, VictimWorkload]:
    return {
        pk: VictimWorkload(name, kind, owner or "", quota_id)
        for pk, name, kind, owner, quota_id in Workload.objects.filter(
            pk__in=workload_ids, state__in=ACTIVE_STATES
        ).values_list("pk", "name", "kind", "owner__username", "quota_id")
    }


def _quota_of(workload_ids: Sequence[int]) -> int | None:
    return Workload.objects.filter(pk__in=workload_ids).values_list("quota_id", flat=True).first()


def _countdown(
    claim: Reclaim, waiting: Mapping[int, Waiting], group_id: int, now: datetime
) -> dict[int, Waiting]:
    """The claimants' waiting reasons, with the countdown of the victims' live notices."""
    deadlines = list(
        ReclaimNotice.objects.filter(
            group_id=group_id,
            state=ReclaimNoticeState.NOTICED,
            workload_id__in=claim.victim_ids,
        ).values_list("deadline", flat=True)
    )
    if not deadlines:
        return {}
    message = countdown_message(claim.message, deadlines, now)
    return {
        wid: Waiting("reclaiming", message, waiting[wid].position)
        for wid in claim.claimant_ids
        if wid in waiting
    }


def _after_commit(
    given: Sequence[ReclaimNotice], cancelled: Sequence[int], executed: Sequence[int]
) -> None:
    """Deliver new notices, clear cancelled ones' signals, tell codespace owners (after commit)."""
    new_ids = [n.pk for n in given]
    cancelled_ids = list(cancelled)
    if new_ids or cancelled_ids:

        def send() -> None:
            for notice_id in new_ids:
                followups().deliver_reclaim_notice(notice_id)
            for notice_id in cancelled_ids:
                followups().deliver_reclaim_notice(notice_id)

        transaction.on_commit(send)
    closed = [*cancelled, *executed]
    codespaces = [n.workload_id for n in given if n.workload_kind == "codespace"]
    codespaces += list(
        ReclaimNotice.objects.filter(pk__in=closed, workload_kind="codespace").values_list(
            "workload_id", flat=True
        )
    )
    if codespaces:
        observers.notify_on_commit((RECLAIM_NOTICE_OBSERVER, wid) for wid in codespaces)


def _closed_before_delivery(notice: ReclaimNotice) -> dict[str, str]:
    """A notice that closed before its delivery ran (a busy worker): what is still PENDING says so
    instead of pending for ever: FAILED for an executed notice (the workload was stopped without its
    warning: operators see it; nothing is sent to the stopped workload), NONE for a cancelled one
    (nothing needed telling any more). Returns what it marked."""
    state = (
        DeliveryState.FAILED if notice.state == ReclaimNoticeState.EXECUTED else DeliveryState.NONE
    )
    detail = f"Not delivered: the notice was {notice.state} before its delivery ran."
    outcome: dict[str, str] = {}
    for what in ("signal", "hook"):
        if getattr(notice, f"{what}_state") == DeliveryState.PENDING:
            ReclaimNotice.objects.filter(
                pk=notice.pk, **{f"{what}_state": DeliveryState.PENDING}
            ).update(**{f"{what}_state": state, f"{what}_detail": detail})
            outcome[what] = state
    return outcome


def deliver_reclaim_notice(notice_id: int, backend: Backend) -> dict[str, str]:
    """Tell the workload of a notice: a live notice is signalled through the backend (its deadline and
    reason) and POSTed to its quota's checkpoint webhook; a cancelled one has its signal cleared. Each
    outcome is recorded on the notice; a backend error is recorded, not raised (the deadline stands)."""
    notice = ReclaimNotice.objects.filter(pk=notice_id).first()
    if notice is None:
        return {}
    if notice.state == ReclaimNoticeState.EXECUTED:
        return _closed_before_delivery(notice)
    workload = Workload.objects.filter(pk=notice.workload_id).first()
    live = notice.state == ReclaimNoticeState.NOTICED
    outcome: dict[str, str] = {}
    if workload is not None:
        placement_id = (
            Placement.objects.filter(workload_id=workload.pk, released_at__isnull=True)
            .values_list("pk", flat=True)
            .first()
        )
        try:
            told = backend.signal_reclaim(
                workload.pk,
                backend_name(workload),
                deadline=notice.deadline if live else None,
                reason=notice.reason,
                placement_id=placement_id,
            )
        except BackendError as exc:
            record_delivery(
                notice_id, what="signal", state=DeliveryState.FAILED, detail=exc.message
            )
            outcome["signal"] = DeliveryState.FAILED
        else:
            state = DeliveryState.SENT if told else DeliveryState.NONE
            if live:
                detail = "" if told else "the cluster has no object for it"
                record_delivery(notice_id, what="signal", state=state, detail=detail)
            outcome["signal"] = state
    if live:
        outcome["hook"] = call_checkpoint_hook(notice_id)
    else:
        _closed_before_delivery(notice)  # its signal is cleared above; nothing stays pending
    return outcome
