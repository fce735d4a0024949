"""Polite reclaim of codespaces: a codespace whose borrowed GPU must go back is *suspended*, not killed.

The scheduler gives its workload a notice (`quotas.models.ReclaimNotice`) and, at the deadline, releases
it; `codespaces.services.sync` then stops the codespace with its home volume kept (restartable by the
owner with Start). This module tells the owner: on every notice change (given, executed, cancelled) the
scheduling observer `codespace_reclaim_notice` calls `tell_owners`, which writes one timeline entry per
notice and state (idempotent) and mails the owner when they have an address. The codespace page shows a
live notice with its countdown (`live_notice`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from codespaces import lifecycle
from codespaces.choices import EventKind
from codespaces.models import Codespace
from quotas.models import ReclaimNotice, ReclaimNoticeState


def live_notice(codespace: Codespace) -> ReclaimNotice | None:
    """The codespace's running reclaim notice (None: no reclaim is coming)."""
    if codespace.workload_id is None:
        return None
    return (
        ReclaimNotice.objects.filter(
            workload_id=codespace.workload_id, state=ReclaimNoticeState.NOTICED
        )
        .select_related("claimant_quota")
        .first()
    )


def owner_message(notice: ReclaimNotice, now: datetime) -> str:
    """What the owner is told about a notice in its current state."""
    team = notice.claimant_quota.name if notice.claimant_quota else "another team"
    if notice.state == ReclaimNoticeState.NOTICED:
        minutes = max(0, int((notice.deadline - now).total_seconds()) // 60)
        return (
            f"Your codespace will be suspended at {notice.deadline:%Y-%m-%d %H:%M:%S} UTC "
            f"(in {minutes} min): its GPU is borrowed and {team} needs its guaranteed GPUs back. "
            "Save your work; the home volume is kept and you can start it again afterwards."
        )
    if notice.state == ReclaimNoticeState.EXECUTED:
        return (
            f"Suspended: its borrowed GPU went back to {team}. The home volume is kept; start the "
            "codespace again when you need it."
        )
    return "The reclaim notice was cancelled: nothing needs the GPU any more, it keeps running."


def tell_owners(workload_ids: Sequence[int]) -> None:
    """The observer: `tell_owners_count` (the count is for tests and logs)."""
    tell_owners_count(workload_ids)


def tell_owners_count(workload_ids: Sequence[int]) -> int:
    """Tell the owners of these workloads' codespaces about their latest reclaim notice: one timeline
    entry (kind NOTICE) per notice and state, and an e-mail. Returns how many were told."""
    now = timezone.now()
    told = 0
    ids = list(workload_ids)
    latest: dict[int, ReclaimNotice] = {}
    for notice in (
        ReclaimNotice.objects.filter(workload_id__in=ids)
        .select_related("claimant_quota")
        .order_by("noticed_at", "pk")
    ):
        latest[notice.workload_id] = notice
    codespaces = Codespace.objects.filter(workload_id__in=list(latest)).select_related("owner")
    for codespace in codespaces:
        assert codespace.workload_id is not None
        notice = latest[codespace.workload_id]
        key = f"{notice.pk}:{notice.state}"
        if codespace.events.filter(kind=EventKind.NOTICE, data__reclaim_notice=key).exists():
            continue
        message = owner_message(notice, now)
        with transaction.atomic():
            lifecycle.record_event(
                codespace,
                EventKind.NOTICE,
                message,
                data={
                    "reclaim_notice": key,
                    "deadline": notice.deadline.isoformat(),
                    "state": notice.state,
                },
            )
        told += 1
        email = getattr(codespace.owner, "email", "")
        if email:
            send_mail(
                f"[Tessera] codespace {codespace.name}: reclaim {notice.state}",
                message,
                None,
                [email],
                fail_silently=True,
            )
    return told
