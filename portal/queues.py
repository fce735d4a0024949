"""Celery queue names. The scheduling app routes each shard's cycles to its own queue."""

from __future__ import annotations

DEFAULT_QUEUES = ("default",)


def worker_queues() -> list[str]:
    """Queues a worker consumes by default: `default` plus every shard queue the scheduling app declares."""
    from scheduling.queues import shard_queues

    queues = list(DEFAULT_QUEUES)
    queues.extend(q for q in shard_queues() if q not in queues)
    return queues
