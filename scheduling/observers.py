"""Workload observers: other apps follow the state of their workloads without scheduling importing them.

`register_workload_observer("codespace", callback)` — `callback(workload_ids)` runs after the commit of
every transaction in which workloads of that kind changed state (placed, running, failed, released,
requeued). Codespaces registers in its AppConfig.ready(); scheduling never imports codespaces.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from django.db import transaction

logger = logging.getLogger(__name__)

Callback = Callable[[Sequence[int]], None]
_observers: dict[str, list[Callback]] = {}


def register_workload_observer(kind: str, callback: Callback) -> None:
    """Call `callback(workload_ids)` on commit whenever workloads of `kind` change state (idempotent)."""
    callbacks = _observers.setdefault(str(kind), [])
    if callback not in callbacks:
        callbacks.append(callback)


def unregister_workload_observer(kind: str, callback: Callback) -> None:
    callbacks = _observers.get(str(kind), [])
    if callback in callbacks:
        callbacks.remove(callback)


def notify_now(kind: str, workload_ids: Sequence[int]) -> None:
    """Call the observers of `kind` (errors are logged, never raised into the scheduler)."""
    for callback in list(_observers.get(str(kind), [])):
        try:
            callback(list(workload_ids))
        except Exception:  # an observer's bug must not undo a committed scheduling decision
            logger.exception("workload observer %r failed for %s", callback, list(workload_ids))


def notify_on_commit(changes: Iterable[tuple[str, int]]) -> None:
    """Schedule the observer calls for (kind, workload id) pairs after the current transaction commits."""
    by_kind: dict[str, list[int]] = {}
    for kind, wid in changes:
        ids = by_kind.setdefault(str(kind), [])
        if wid not in ids:
            ids.append(wid)
    for kind, ids in by_kind.items():
        if _observers.get(kind):
            transaction.on_commit(lambda k=kind, i=tuple(ids): notify_now(k, i))  # type: ignore[misc]
