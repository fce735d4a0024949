"""One bad row never stops a periodic task: `run_each` runs a per-item function over rows, each in its
own savepoint, logs a failure with the row's id and goes on; the task returns the counts
(`ItemFailures.as_dict()`), so operators see them in the task result and the log.

Used by every beat task that loops over rows (idle auto-stop, codespace and gang reconcilers,
telemetry ingestion). A failure is logged at ERROR with the traceback under the `tessera.periodic`
logger, naming the task and the row: `idle-stop: codespace 17 failed: OverflowError ...`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import transaction

logger = logging.getLogger("tessera.periodic")

T = TypeVar("T")


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
    """Call `work(item)` for every item, each in a savepoint (a database error rolls back that item
    only and leaves the connection usable); an exception is logged with `kind` and `key(item)` and
    counted, and the next item runs. Returns `failures` (a new one if None) with the counts."""
    report = failures if failures is not None else ItemFailures()
    for item in items:
        try:
            with transaction.atomic():
                work(item)
        except Exception:
            logger.exception("%s: %s %s failed", task, kind, key(item))
            report.failed_ids.append(key(item))
        else:
            report.done += 1
    return report
