"""Polite reclaim: borrowed work that must give capacity back gets a notice and a countdown first.

A quota group with `reclaim_notice_seconds > 0` does not stop reclaim victims at once. The cycle's
decide step chooses the victims as before (`quotas.reclaim.plan_reclaim`); `plan_notices` (pure) then
compares them with the group's live notices and says, as data, which victims get a notice now, which
notices reached their deadline (execute: stop them) and which are no longer needed (cancel: the pressure
went away). `scheduling.services.polite_reclaim` applies that plan in the cycle's transaction.

States (`quotas.models.RECLAIM_NOTICE_TRANSITIONS`), each change a compare-and-set on (state, version):

    noticed ──(deadline passed, still needed)──► executed
       └────(no longer needed)─────────────────► cancelled

A `ReclaimNotice` row is the only record of a notice: the quota page, the codespace page and
`GET /api/v1/quotas/{id}/reclaim-notices/` read it. After commit the workload is signalled through the
backend (`Backend.signal_reclaim`) and the victim quota's checkpoint webhook is called
(`call_checkpoint_hook`: a JSON POST, signed with HMAC-SHA256 of the body under
`TESSERA_CHECKPOINT_HOOK_SECRET`, short timeout, outcome recorded, never raised).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from portal.errors import Forbidden, InvalidInput
from portal.scoping import is_operator
from quotas.history import notify_team_admins, record_change, record_quota_change
from quotas.models import (
    MAX_RECLAIM_NOTICE_SECONDS,
    RECLAIM_NOTICE_TRANSITIONS,
    ChangeAction,
    DeliveryState,
    Quota,
    QuotaGroup,
    ReclaimNotice,
    ReclaimNoticeState,
)
from quotas.reclaim import Victim

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Tessera-Signature"
MAX_DETAIL = 500


# ------------------------------------------------------------------------------------ the plan (pure)


@dataclass(frozen=True, slots=True)
class LiveNotice:
    """A NOTICED notice as the plan sees it."""

    notice_id: int
    workload_id: int
    deadline: datetime


@dataclass(frozen=True, slots=True)
class NewNotice:
    """A notice to give: one workload of a victim, stopped at `deadline` unless cancelled first."""

    victim: Victim
    workload_id: int
    deadline: datetime


@dataclass(frozen=True, slots=True)
class NoticePlan:
    """What polite reclaim does in one cycle: notices to give, to execute (ids), to cancel (ids), and
    the victims to stop now (their notices' deadline passed, or the group gives no notice)."""

    give: tuple[NewNotice, ...] = ()
    execute: tuple[int, ...] = ()
    cancel: tuple[int, ...] = ()
    stop_now: tuple[Victim, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.give or self.execute or self.cancel or self.stop_now)


def plan_notices(
    victims: Sequence[Victim],
    live: Sequence[LiveNotice],
    *,
    now: datetime,
    notice_seconds: int,
) -> NoticePlan:
    """The polite-reclaim plan of one cycle (pure, deterministic).

    `victims` are the cycle's reclaim victims (empty: no reclaim is needed now). A live notice of a
    workload that is no longer a victim is cancelled. A victim stops now when the group gives no notice
    (`notice_seconds == 0`, today's behaviour) or when every one of its workloads has a notice whose
    deadline has passed (a gang stops as one); those notices are executed. Every other victim workload
    without a notice gets one, due at `now + notice_seconds`."""
    by_workload = {n.workload_id: n for n in live}
    wanted = {wid for v in victims for wid in v.workload_ids}
    cancel = sorted(n.notice_id for n in live if n.workload_id not in wanted)
    give: list[NewNotice] = []
    execute: list[int] = []
    stop_now: list[Victim] = []
    deadline = now + timedelta(seconds=notice_seconds)
    for victim in victims:
        notices = [by_workload.get(wid) for wid in victim.workload_ids]
        due = notice_seconds == 0 or all(n is not None and n.deadline <= now for n in notices)
        if due:
            stop_now.append(victim)
            execute.extend(n.notice_id for n in notices if n is not None)
            continue
        give.extend(
            NewNotice(victim, wid, deadline)
            for wid, n in zip(victim.workload_ids, notices, strict=True)
            if n is None
        )
    return NoticePlan(tuple(give), tuple(sorted(execute)), tuple(cancel), tuple(stop_now))


def countdown_message(claim_message: str, deadlines: Sequence[datetime], now: datetime) -> str:
    """The claimant's waiting reason while the victims' notices run."""
    if not deadlines:
        return claim_message
    last = max(deadlines)
    seconds = max(0, int((last - now).total_seconds()))
    return (
        f"{claim_message} Polite reclaim: they were given notice and stop at "
        f"{last:%H:%M:%S} UTC (in {seconds} s)."
    )


# ------------------------------------------------------------------------------ reading and changing


def live_notices(group_id: int) -> list[LiveNotice]:
    """The group's NOTICED notices (the plan's input)."""
    return [
        LiveNotice(pk, workload_id, deadline)
        for pk, workload_id, deadline in ReclaimNotice.objects.filter(
            group_id=group_id, state=ReclaimNoticeState.NOTICED
        )
        .order_by("pk")
        .values_list("pk", "workload_id", "deadline")
    ]


def transition(notice_ids: Sequence[int], to: str, *, now: datetime, note: str) -> list[int]:
    """Compare-and-set NOTICED → `to` for each notice; returns the ids that moved (a notice another
    writer already closed is left alone)."""
    if to not in RECLAIM_NOTICE_TRANSITIONS[ReclaimNoticeState.NOTICED]:
        raise ValueError(f"a reclaim notice cannot become {to}")
    moved: list[int] = []
    for notice_id in sorted(set(notice_ids)):
        changed = ReclaimNotice.objects.filter(
            pk=notice_id, state=ReclaimNoticeState.NOTICED
        ).update(state=to, closed_at=now, close_note=note[:MAX_DETAIL], version=F("version") + 1)
        if changed:
            moved.append(notice_id)
    return moved


@dataclass(frozen=True, slots=True)
class VictimWorkload:
    """What a notice copies of a victim's workload (the workload is in the scheduling app)."""

    name: str
    kind: str
    owner_username: str
    quota_id: int


def give_notices(
    group: QuotaGroup,
    notices: Sequence[NewNotice],
    workloads: Mapping[int, VictimWorkload],
    *,
    claimant_ids: Sequence[int],
    claimant_quota_id: int | None,
    reason: str,
    now: datetime,
) -> list[ReclaimNotice]:
    """Create the NOTICED rows of a plan (workloads no longer known are skipped) and tell each victim
    quota's team admins once (QuotaNotice). The caller schedules the delivery after commit."""
    hooks = dict(
        Quota.objects.filter(pk__in={w.quota_id for w in workloads.values()}).values_list(
            "pk", "checkpoint_webhook_url"
        )
    )
    rows = [
        ReclaimNotice(
            group=group,
            quota_id=workloads[n.workload_id].quota_id,
            claimant_quota_id=claimant_quota_id,
            claimant_workload_ids=list(claimant_ids),
            workload_id=n.workload_id,
            workload_name=workloads[n.workload_id].name[:253],
            workload_kind=workloads[n.workload_id].kind[:20],
            owner_username=workloads[n.workload_id].owner_username[:150],
            gang_id=n.victim.gang_id,
            victim_name=n.victim.name[:253],
            reason=reason[:1000],
            noticed_at=now,
            deadline=n.deadline,
            hook_state=DeliveryState.PENDING
            if hooks.get(workloads[n.workload_id].quota_id)
            else DeliveryState.NONE,
        )
        for n in notices
        if n.workload_id in workloads
    ]
    ReclaimNotice.objects.bulk_create(rows)
    created = list(
        ReclaimNotice.objects.filter(
            group=group, state=ReclaimNoticeState.NOTICED, noticed_at=now
        ).filter(workload_id__in=[r.workload_id for r in rows])
    )
    by_quota: dict[int, list[ReclaimNotice]] = {}
    for row in created:
        by_quota.setdefault(row.quota_id, []).append(row)
    for quota in Quota.objects.filter(pk__in=by_quota).select_related("group"):
        names = ", ".join(sorted(r.workload_name for r in by_quota[quota.pk]))
        deadline = max(r.deadline for r in by_quota[quota.pk])
        notify_team_admins(
            quota,
            "reclaim_notice",
            f"Borrowed work of {quota.name} ({names}) will be stopped at {deadline:%Y-%m-%d %H:%M:%S} "
            f"UTC so that another team gets its guaranteed GPUs back: {reason[:300]}",
        )
    return created


def record_delivery(notice_id: int, *, what: str, state: str, detail: str = "") -> None:
    """Record how the signal (`what="signal"`) or the webhook (`what="hook"`) went."""
    fields: dict[str, Any] = {f"{what}_state": state, f"{what}_detail": detail[:MAX_DETAIL]}
    if what == "hook":
        fields["hook_called_at"] = timezone.now()
    ReclaimNotice.objects.filter(pk=notice_id).update(**fields)


def sign(body: bytes, secret: str) -> str:
    """The signature header's value: `sha256=<hex HMAC-SHA256 of the body under the secret>`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def hook_body(notice: ReclaimNotice) -> bytes:
    """The checkpoint webhook's JSON body (keys sorted: the signature is over these exact bytes)."""
    return json.dumps(
        {
            "event": "reclaim_notice",
            "notice_id": notice.pk,
            "group": notice.group.name,
            "quota": notice.quota.name,
            "workload_id": notice.workload_id,
            "workload": notice.workload_name,
            "kind": notice.workload_kind,
            "owner": notice.owner_username,
            "deadline": notice.deadline.isoformat(),
            "reason": notice.reason,
        },
        sort_keys=True,
    ).encode()


def call_checkpoint_hook(notice_id: int) -> str:
    """POST the notice to its quota's checkpoint webhook (when it has one and the notice is still
    live), signed when `TESSERA_CHECKPOINT_HOOK_SECRET` is set, with a short timeout. The outcome is
    recorded on the notice; nothing is raised. Returns the hook state."""
    notice = ReclaimNotice.objects.select_related("group", "quota").filter(pk=notice_id).first()
    if notice is None or notice.state != ReclaimNoticeState.NOTICED:
        return DeliveryState.NONE
    url = notice.quota.checkpoint_webhook_url
    if not url:
        record_delivery(notice_id, what="hook", state=DeliveryState.NONE)
        return DeliveryState.NONE
    body = hook_body(notice)
    headers = {"Content-Type": "application/json"}
    secret = getattr(settings, "TESSERA_CHECKPOINT_HOOK_SECRET", "")
    if secret:
        headers[SIGNATURE_HEADER] = sign(body, secret)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310
    timeout = float(getattr(settings, "TESSERA_CHECKPOINT_HOOK_TIMEOUT_SECONDS", 5.0))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status = getattr(response, "status", 200)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        logger.warning("checkpoint hook %s of notice %s failed: %s", url, notice_id, exc)
        record_delivery(notice_id, what="hook", state=DeliveryState.FAILED, detail=str(exc))
        return DeliveryState.FAILED
    record_delivery(notice_id, what="hook", state=DeliveryState.SENT, detail=f"HTTP {status}")
    return DeliveryState.SENT


def notices_for_quota(quota: Quota) -> QuerySet[ReclaimNotice]:
    """The notices that concern a quota: its own work given notice, or work stopped for it."""
    return ReclaimNotice.objects.filter(Q(quota=quota) | Q(claimant_quota=quota)).select_related(
        "quota", "claimant_quota", "group"
    )


def notice_json(notice: ReclaimNotice, now: datetime | None = None) -> dict[str, Any]:
    """One notice as the API and the pages show it (the reclaim plan: what, whose, when)."""
    now = now or timezone.now()
    live = notice.state == ReclaimNoticeState.NOTICED
    return {
        "id": notice.pk,
        "state": notice.state,
        "group": notice.group.name,
        "quota": notice.quota.name,
        "quota_id": notice.quota_id,
        "claimant_quota": notice.claimant_quota.name if notice.claimant_quota else None,
        "claimant_quota_id": notice.claimant_quota_id,
        "workload_id": notice.workload_id,
        "workload": notice.workload_name,
        "kind": notice.workload_kind,
        "owner": notice.owner_username,
        "reason": notice.reason,
        "noticed_at": notice.noticed_at,
        "deadline": notice.deadline,
        "seconds_left": max(0, int((notice.deadline - now).total_seconds())) if live else None,
        "closed_at": notice.closed_at,
        "close_note": notice.close_note,
        "signal_state": notice.signal_state,
        "hook_state": notice.hook_state,
        "hook_detail": notice.hook_detail,
    }


# ----------------------------------------------------------------------------------------- settings


def clean_notice_seconds(value: Any) -> int:
    """A whole number of seconds from 0 (stop at once) to MAX_RECLAIM_NOTICE_SECONDS."""
    message = (
        f"A whole number of seconds from 0 to {MAX_RECLAIM_NOTICE_SECONDS} (0 = stop at once)."
    )
    if value in (None, ""):
        return 0
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput.for_field("reclaim_notice_seconds", message)
    try:
        number = int(value)
    except ValueError as exc:
        raise InvalidInput.for_field("reclaim_notice_seconds", message) from exc
    if not 0 <= number <= MAX_RECLAIM_NOTICE_SECONDS:
        raise InvalidInput.for_field("reclaim_notice_seconds", message)
    return number


def clean_webhook_url(value: Any) -> str:
    """Empty, or an http(s) URL of at most 500 characters."""
    if value in (None, ""):
        return ""
    message = "An http:// or https:// URL of at most 500 characters (empty = no hook)."
    if not isinstance(value, str) or len(value) > 500:
        raise InvalidInput.for_field("checkpoint_webhook_url", message)
    try:
        URLValidator(schemes=["http", "https"])(value)
    except ValidationError as exc:
        raise InvalidInput.for_field("checkpoint_webhook_url", message) from exc
    return value


@transaction.atomic
def set_reclaim_notice(group: QuotaGroup | int, seconds: Any, *, actor: Any) -> QuotaGroup:
    """Set a group's reclaim notice (0 = today's immediate reclaim). Operators only; audited
    (QuotaChange, subject "group"); the group's cycle re-runs after commit."""
    if not is_operator(actor):
        raise Forbidden("Only platform operators set a group's reclaim notice.")
    value = clean_notice_seconds(seconds)
    group_id = group if isinstance(group, int) else group.pk
    locked = QuotaGroup.objects.select_for_update().get(pk=group_id)
    before = locked.reclaim_notice_seconds
    QuotaGroup.objects.filter(pk=group_id).update(
        reclaim_notice_seconds=value, version=F("version") + 1
    )
    locked.refresh_from_db()
    record_change(
        subject="group",
        subject_name=locked.name,
        action=ChangeAction.UPDATED,
        actor=actor,
        group=locked,
        quota=None,
        tenant=None,
        before={"reclaim_notice_seconds": before},
        after={"reclaim_notice_seconds": value},
        version=locked.version,
        reschedule=True,
    )
    return locked


@transaction.atomic
def set_reclaim_settings(
    quota: Quota | int,
    *,
    checkpoint_webhook_url: Any = None,
    equal_borrowing_share: Any = None,
    actor: Any,
) -> Quota:
    """Set a quota's checkpoint webhook and/or its equal share of borrowing (None = unchanged).
    Operators only; audited (QuotaChange, subject "reclaim")."""
    if not is_operator(actor):
        raise Forbidden("Only platform operators set a quota's reclaim settings.")
    quota_id = quota if isinstance(quota, int) else quota.pk
    locked = (
        Quota.objects.select_for_update(of=("self",), no_key=True)
        .select_related("group", "tenant")
        .get(pk=quota_id)
    )
    changes: dict[str, Any] = {}
    if checkpoint_webhook_url is not None:
        changes["checkpoint_webhook_url"] = clean_webhook_url(checkpoint_webhook_url)
    if equal_borrowing_share is not None:
        if not isinstance(equal_borrowing_share, bool):
            raise InvalidInput.for_field("equal_borrowing_share", "true or false.")
        changes["equal_borrowing_share"] = equal_borrowing_share
    if not changes:
        return locked
    before = {name: getattr(locked, name) for name in changes}
    Quota.objects.filter(pk=quota_id).update(**changes, version=F("version") + 1)
    locked.refresh_from_db()
    record_quota_change(
        locked,
        subject="reclaim",
        action=ChangeAction.UPDATED,
        actor=actor,
        before=before,
        after=changes,
        version=locked.version,
        reschedule=True,
    )
    return locked


@transaction.atomic
def save_reclaim_settings(
    quota: Quota,
    *,
    reclaim_notice_seconds: Any,
    checkpoint_webhook_url: Any,
    equal_borrowing_share: Any,
    actor: Any,
) -> Quota:
    """The quota page's "Polite reclaim" form: the group's notice and the quota's hook and equal share,
    all or nothing (each audited)."""
    seconds = clean_notice_seconds(reclaim_notice_seconds)
    if seconds != quota.group.reclaim_notice_seconds:
        set_reclaim_notice(quota.group_id, seconds, actor=actor)
    return set_reclaim_settings(
        quota,
        checkpoint_webhook_url=checkpoint_webhook_url or "",
        equal_borrowing_share=bool(equal_borrowing_share),
        actor=actor,
    )


def reclaim_plan(quota: Quota, *, limit: int = 50) -> list[dict[str, Any]]:
    """The quota page's reclaim plan: live notices first, then the latest closed ones."""
    now = timezone.now()
    rows = list(notices_for_quota(quota)[:limit])
    rows.sort(key=lambda n: (n.state != ReclaimNoticeState.NOTICED, -n.noticed_at.timestamp()))
    return [notice_json(n, now) for n in rows]
