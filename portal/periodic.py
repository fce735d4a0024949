"""Periodic tasks run at most once per period, whatever beat does.

Beat keeps its schedule in a local file: a beat killed and restarted (or two beats during a rolling
deploy) re-sends the crontab entries of the current period, and a broker may deliver a message twice.
A task whose work must happen once per period claims the period in the transaction that does the work
(`claim_period`): the first run inserts the claim and works, every later run of the same period finds
the claim (on PostgreSQL its INSERT waits for a run still in progress) and skips. A run that fails rolls
its claim back with its work, so the retry or the redelivered message still does it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, transaction

from portal.models import PeriodClaim

CLAIM_RETENTION = timedelta(days=2)


def period_start(now: datetime, seconds: int) -> datetime:
    """The start of the `seconds`-long period (aligned to the Unix epoch, UTC) containing `now`."""
    epoch = int(now.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


def claim_period(task_name: str, start: datetime) -> bool:
    """Claim `task_name`'s period starting at `start`; False when a run already claimed it.

    Call it inside the transaction that does the period's work: the claim commits or rolls back with
    that work. Also prunes the task's claims older than CLAIM_RETENTION (one indexed DELETE)."""
    with transaction.atomic():
        PeriodClaim.objects.filter(
            task_name=task_name, period_start__lt=start - CLAIM_RETENTION
        ).delete()
        try:
            with transaction.atomic():
                PeriodClaim.objects.create(task_name=task_name, period_start=start)
        except IntegrityError:
            return False
    return True
