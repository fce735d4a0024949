"""Small database helpers the ORM has no API for."""

from __future__ import annotations

from functools import cache

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model


def reserve_id(model: type[Model], using: str = DEFAULT_DB_ALIAS) -> int | None:
    """The next primary key of `model`'s table, taken from its sequence before the INSERT (PostgreSQL),
    so rows that must name each other can be written once each; None where there is no sequence
    (SQLite): save the row to get its id."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(%s::regclass)",
            [_sequence(using, model._meta.db_table, model._meta.pk.column)],
        )
        return int(cursor.fetchone()[0])


@cache
def _sequence(using: str, table: str, column: str) -> str:
    """The name of the sequence behind `table`'s primary key (looked up once per process)."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, %s)", [table, column])
        return str(cursor.fetchone()[0])
