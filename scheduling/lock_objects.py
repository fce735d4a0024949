"""Locks of the scheduling service, always taken in the order of docs/adr/0002: the shards' advisory locks
(ascending group id), then row locks table by table (gang, workload, node rows), each in pk order.
Transaction-scoped only: they end with the transaction (or the process).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from scheduling.models import Node

#: Key space of the scheduling shards' advisory locks (first int of the two-int lock key).
SHARD_LOCK_CLASS = 0x7E55


def lock_shard(group_id: int) -> None:
    """Serialize the writers of one shard (a quota group) until the end of the current transaction.

    PostgreSQL: `pg_advisory_xact_lock(SHARD_LOCK_CLASS, group_id)`, released at commit or rollback and when
    the session dies (a SIGKILLed worker never leaves it held). SQLite: every transaction is IMMEDIATE
    (settings), which already serializes all writers.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [SHARD_LOCK_CLASS, int(group_id)])


def lock_shards(group_ids: Iterable[int]) -> None:
    """Lock several shards, in id order (so two callers can never deadlock on them)."""
    for gid in sorted(set(group_ids)):
        lock_shard(gid)


def lock_nodes(node_ids: Iterable[int]) -> list[Node]:
    """Row-lock nodes in pk order (evaluated, so the lock is really taken): the last guard against
    over-commit when two shards share a node or a snapshot is stale."""
    return list(Node.objects.select_for_update().filter(pk__in=set(node_ids)).order_by("pk"))
