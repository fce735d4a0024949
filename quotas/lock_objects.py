"""Locks of the quotas app. Transaction-scoped only; taken before any row lock (docs/adr/0002)."""

from __future__ import annotations

from django.db import connection

#: Key space of the quotas app's advisory locks (first int of the two-int lock key).
QUOTAS_LOCK_CLASS = 0x0A7A
#: Second int: the lock serializing changes of group node selectors.
GROUP_SELECTORS = 1


def lock_group_selectors() -> None:
    """Serialize the writers of group node selectors until the end of the current transaction, so two
    concurrent creates or edits cannot both pass the "no two groups share a node" check.

    PostgreSQL: `pg_advisory_xact_lock(QUOTAS_LOCK_CLASS, GROUP_SELECTORS)`. SQLite: every transaction is
    IMMEDIATE (settings), which already serializes all writers.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)", [QUOTAS_LOCK_CLASS, GROUP_SELECTORS]
            )
