"""A database that refuses one row: a BEFORE trigger that raises for the rows matching a condition, on
SQLite and PostgreSQL. For tests of set-based periodic work (docs/adr/0004): one bad row, refused by
the database inside a statement that touches many, must not stop the others."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def refused_rows(table: str, operation: str, condition: str) -> Iterator[None]:
    """Make the database refuse `operation` ("INSERT", "UPDATE" or "DELETE") on the rows of `table`
    matching `condition` (SQL on NEW / OLD, e.g. "OLD.id = 7") while the block runs."""
    name = f"refuse_{table}_{operation.lower()}"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN RAISE EXCEPTION 'row refused by {name}'; END $$"
            )
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE {operation} ON {table} FOR EACH ROW "
                f"WHEN ({condition}) EXECUTE FUNCTION {name}()"
            )
        else:
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE {operation} ON {table} FOR EACH ROW "
                f"WHEN {condition} BEGIN SELECT RAISE(ABORT, 'row refused by {name}'); END"
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(f"DROP TRIGGER {name} ON {table}")
                cursor.execute(f"DROP FUNCTION {name}()")
            else:
                cursor.execute(f"DROP TRIGGER {name}")
