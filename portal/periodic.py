"""What every periodic task needs: it survives one bad row, and it runs at most once per period.

**One bad row never stops a periodic task** (docs/adr/0004): `run_each` runs a per-item function over
rows, each in its own transaction (a savepoint inside a caller's), logs a failure with the row's id and
goes on; the task returns the counts (`ItemFailures.as_dict()`), so operators see them in the task
result and the log. Used by every beat task that loops over rows (idle auto-stop, codespace and gang
reconcilers, telemetry ingestion). The set-based loops (placement drift, status and inventory sync,
hourly rollups, pruning) use `run_in_chunks`: the set-based step on chunks of rows, and `run_each`
over the rows of a chunk that raised, so a bad row costs its chunk one slow pass, not the task. A failure is logged at ERROR with the traceback under the
`tessera.periodic` logger, naming the task and the row: `idle-stop: codespace 17 failed: ...`.

**At most once per period.** Beat keeps its schedule in a local file: a beat killed and restarted (or
two beats during a rolling deploy) re-sends the crontab entries of the current period, and a broker may
deliver a message twice. A task whose work must happen once per period claims the period in the
transaction that does the work (`claim_period`): the first run inserts the claim and works, every later
run of the same period finds the claim (on PostgreSQL its INSERT waits for a run still in progress) and
skips. A run that fails rolls its claim back with its work, so the retry or the redelivered message
still does it.

**A queued copy that a later run covered is skipped.** Most beat tasks are sweeps: they look at the
current state (sync the cluster's status, reconcile, audit, drive reconfigurations), so one run covers
every copy sent before it started. When the default worker falls behind (restarted after a crash, a
slow audit, a loaded machine) beat keeps sending, and without this each queued copy would repeat the
same sweep and delay the follow-up work queued behind them (making placed workloads real) by minutes.
Beat stamps each message it sends with the sweep's name and its send time (portal.celery); the worker
claims the sweep before running it (`claim_sweep`, one UPDATE) and skips the copy when a run of the
same sweep started after the copy was sent. The redelivered message of a run that crashed is the
claimer itself and runs again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from portal.models import PeriodClaim, SweepRun
from portal.transactions import run_in_transaction

logger = logging.getLogger("tessera.periodic")

T = TypeVar("T")
CLAIM_RETENTION = timedelta(days=2)


@dataclass
class ItemFailures:
    """How a `run_each` pass went: items done and the ids of the ones that raised."""

    done: int = 0
    failed_ids: list[Any] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return len(self.failed_ids)

    def as_dict(self) -> dict[str, Any]:
        return {"done": self.done, "failed": self.failed, "failed_ids": list(self.failed_ids)}


def run_each(
    items: Iterable[T],
    work: Callable[[T], object],
    *,
    task: str,
    kind: str,
    key: Callable[[T], Any] = lambda item: getattr(item, "pk", item),
    failures: ItemFailures | None = None,
) -> ItemFailures:
    """Call `work(item)` for every item, each in its own transaction (a savepoint inside a caller's:
    a database error rolls back that item only and leaves the connection usable; a lost lock race is
    retried, portal.transactions); an exception is logged with `kind` and `key(item)` and
    counted, and the next item runs. Returns `failures` (a new one if None) with the counts."""
    report = failures if failures is not None else ItemFailures()
    for item in items:
        try:
            run_in_transaction(functools.partial(work, item), name=f"{task}: {kind} {key(item)}")
        except Exception:
            logger.exception("%s: %s %s failed", task, kind, key(item))
            report.failed_ids.append(key(item))
        else:
            report.done += 1
    return report


CHUNK_ROWS = 500


def run_in_chunks(
    items: Sequence[T],
    work: Callable[[Sequence[T]], object],
    *,
    task: str,
    kind: str,
    key: Callable[[T], Any] = lambda item: getattr(item, "pk", item),
    chunk: int = CHUNK_ROWS,
    failures: ItemFailures | None = None,
    transactional: bool = True,
) -> ItemFailures:
    """`run_each` for set-based work: `work(rows)` handles many rows at once (a few queries for any
    number), so it runs on chunks of `chunk` rows, each in its own transaction; a chunk that raises
    is rolled back and run again row by row (`run_each` of `work([row])`), so only the bad row is
    left out, logged and counted. The common case keeps the set-based speed; a bad row costs one
    per-row pass over its chunk. `work` must be safe to repeat after a rollback (it is, as the whole
    chunk's writes were undone). `transactional=False`: `work` manages its own transactions (a
    chunk runs as before, several short transactions, and must be safe to repeat: compare-and-set
    updates); only the per-row fallback runs each row in a transaction of its own."""
    report = failures if failures is not None else ItemFailures()
    for start in range(0, len(items), chunk):
        rows = items[start : start + chunk]
        try:
            if transactional:
                run_in_transaction(
                    functools.partial(work, rows), name=f"{task}: {len(rows)} {kind}s"
                )
            else:
                work(rows)
        except Exception as exc:
            logger.warning(
                "%s: a chunk of %d %ss failed (%s: %s); running them one by one",
                task,
                len(rows),
                kind,
                type(exc).__name__,
                exc,
            )
            run_each(rows, lambda row: work([row]), task=task, kind=kind, key=key, failures=report)
        else:
            report.done += len(rows)
    return report


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


def claim_sweep(name: str, *, sent_at: datetime, task_id: str, now: datetime | None = None) -> bool:
    """Claim a run of the sweep `name` for the copy `task_id` sent at `sent_at`: True to run it (no run
    started since it was sent, or it is the redelivered claimer), False when a run that started after
    it was sent already covers it. Commits at once (autocommit), so every worker sees the claim."""
    started = now or timezone.now()
    claimed = SweepRun.objects.filter(
        Q(started_at__lte=sent_at) | Q(task_id=task_id), name=name
    ).update(started_at=started, sent_at=sent_at, task_id=task_id)
    if claimed:
        return True
    try:
        with transaction.atomic():
            _, created = SweepRun.objects.get_or_create(
                name=name, defaults={"started_at": started, "sent_at": sent_at, "task_id": task_id}
            )
    except IntegrityError:  # another worker created it between our get and create: it covers us
        return False
    return created
