"""Celery queues of the scheduling shards.

Each quota group (a shard) has its cycles routed to one queue, `sched-<slot>`, where the slot is
`group_id % TESSERA_SCHEDULING_QUEUES`. A fixed set of queue names means a worker started before a group
was created still consumes that group's cycles; with at least as many slots as groups, every shard has a
queue of its own (set TESSERA_SCHEDULING_QUEUES to the number of groups, or more).
"""

from __future__ import annotations

from django.conf import settings

from portal.queues import DEFAULT_QUEUES

QUEUE_PREFIX = "sched-"


def queue_count() -> int:
    return max(1, int(getattr(settings, "TESSERA_SCHEDULING_QUEUES", 4)))


def queue_for_group(group_id: int) -> str:
    """The queue that runs the scheduling cycles of a group."""
    return f"{QUEUE_PREFIX}{int(group_id) % queue_count()}"


def shard_queues() -> list[str]:
    """Every shard queue a worker consumes (`worker_queues` adds `default`)."""
    return [f"{QUEUE_PREFIX}{i}" for i in range(queue_count())]


def worker_queues() -> list[str]:
    """Queues a worker consumes by default: `default` plus every shard queue."""
    queues = list(DEFAULT_QUEUES)
    queues.extend(q for q in shard_queues() if q not in queues)
    return queues
