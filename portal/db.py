"""Small database helpers the ORM has no API for: statements sent together (PostgreSQL pipeline mode),
ids reserved before the INSERT, an INSERT built once per model and column set.

Measured piece by piece with `bench/api_cost.py --requests 500 [--off pipeline|insert]` on PostgreSQL
(CPU per request in-process, one process per run with its own ping baseline, on a 2-core machine
shared with other builds, so several runs each):
- pipelining changes no CPU (list 5.0-5.6 ms on vs 3.3-5.7 off, submit 10.8-12.0 vs 9.1-12.8); what it
  saves is round trips (the statements and the COMMIT in one), a wait, which that machine's wall times
  (submit 91/132 ms on, 105/87 off) could not resolve: kept until a measurement on an idle machine
  says otherwise;
- the INSERT cache (`insert`) saves the submit about 1.8 ms of its ~11 ms of CPU: 10.5/10.8/11.2/12.0
  ms with it, 11.5/11.9/13.7/14.7 ms through `save()` (four pairs of runs): kept.
On SQLite each helper is the plain path (statements one by one, ids from the INSERT,
`save(force_insert=True)` semantics), which the default test run exercises.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models, transaction
from django.db.models import Field, Model, signals
from psycopg.pq import TransactionStatus


def reserve_id(model: type[Model], using: str = DEFAULT_DB_ALIAS) -> int | None:
    """The next primary key of `model`'s table, taken from its sequence before the INSERT (PostgreSQL),
    so rows that must name each other can be written once each; None where there is no sequence
    (SQLite): save the row to get its id."""
    ids = reserve_ids([model], using=using)
    return None if ids is None else ids[0]


# A statement to run with others in one round trip: its SQL and parameters.
Statement = tuple[str, Sequence[Any]]


def reserve_ids(
    models: Sequence[type[Model]], *, lock: Model | None = None, using: str = DEFAULT_DB_ALIAS
) -> list[int] | None:
    """The next primary key of each of `models`' tables (PostgreSQL sequences), in one statement that
    also locks `lock`'s row (`SELECT ... FOR UPDATE`) when one is given: a transaction that serialises
    on a row and writes new rows naming each other pays one round trip for both. None where there are
    no sequences (SQLite, which serialises writers anyway): the lock is then a plain read of the row,
    and the INSERTs assign the ids. `reserve_ids_statement` is the same statement, to send with
    others (`run_together`)."""
    statement = reserve_ids_statement(models, lock=lock, using=using)
    if statement is None:
        if lock is not None:
            lock._meta.model._default_manager.using(using).filter(
                pk=lock.pk
            ).select_for_update().exists()
        return None
    return reserved_ids(run_together([statement], using=using)[0], lock)


def reserve_ids_statement(
    models: Sequence[type[Model]], *, lock: Model | None = None, using: str = DEFAULT_DB_ALIAS
) -> Statement | None:
    """`reserve_ids`' statement (read its rows with `reserved_ids`), or None without sequences."""
    if connections[using].vendor != "postgresql":
        return None
    sql = _reserve_sql(using, tuple(models), None if lock is None else lock._meta.model)
    return sql, [] if lock is None else [lock.pk]


def reserved_ids(rows: Sequence[Sequence[Any]], lock: Model | None = None) -> list[int]:
    """The ids from the rows of a `reserve_ids_statement`; DoesNotExist if the locked row is gone."""
    if not rows:  # only with a lock: the locked row is gone
        assert lock is not None
        raise lock._meta.model.DoesNotExist(  # type: ignore[attr-defined]
            f"{lock._meta.model.__name__} {lock.pk} no longer exists."
        )
    return [int(value) for value in rows[0]]


def run_together(
    statements: Sequence[Statement], using: str = DEFAULT_DB_ALIAS
) -> list[list[tuple[Any, ...]]]:
    """Run the statements in order and return each one's rows (none for a statement that returns
    none). On PostgreSQL they travel together (pipeline mode, one round trip): the server still runs
    them one after the other, each with its own snapshot, so a statement that waits for a row lock
    makes the ones after it wait and then see what the lock holder committed. Outside a transaction
    they form one (reads, typically)."""
    connection = connections[using]
    if connection.vendor != "postgresql" or (len(statements) < 2 and not _pipelining(connection)):
        results = []
        for sql, params in statements:
            with connection.cursor() as cursor:
                fast_datetimes(cursor)
                cursor.execute(sql, params)
                results.append(_rows(cursor))
        return results
    cursors = []
    try:
        # (inside a caller's pipeline this nests: its end waits for these results too)
        with _psycopg_pipeline(connection):
            for sql, params in statements:
                cursor = fast_datetimes(connection.cursor())
                cursors.append(cursor)
                cursor.execute(sql, params)
        # the end of the pipeline brought every result back
        return [_rows(cursor) for cursor in cursors]
    finally:
        for cursor in cursors:
            cursor.close()


def _pipelining(connection: Any) -> bool:
    """Whether this PostgreSQL connection is in pipeline mode (`pipeline()`)."""
    return connection.connection is not None and bool(connection.connection.pgconn.pipeline_status)


def _rows(cursor: Any) -> list[tuple[Any, ...]]:
    """A statement's rows; none for one that returns no rows (an UPDATE without RETURNING)."""
    return cursor.fetchall() if cursor.description is not None else []


@cache
def _reserve_sql(using: str, models: tuple[type[Model], ...], lock: type[Model] | None) -> str:
    quote = connections[using].ops.quote_name
    ids = ", ".join(
        "nextval('"
        + _sequence(using, m._meta.db_table, m._meta.pk.column).replace("'", "''")
        + "')"
        for m in models
    )
    if lock is None:
        return f"SELECT {ids}"
    table, pk = quote(lock._meta.db_table), quote(lock._meta.pk.column)
    return f"SELECT {ids} FROM {table} WHERE {pk} = %s FOR UPDATE"


@contextmanager
def pipeline(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Send the block's statements to PostgreSQL without waiting for each one (psycopg pipeline mode):
    a statement whose result is not read (an INSERT of a row whose id was reserved) costs no round
    trip of its own; reading a result, and the end of the block, wait for everything sent so far. So
    an error of a queued statement (a unique violation, ...) can surface at the end of the block; it
    is raised as Django's exception and aborts the transaction like any other. Only inside
    `transaction.atomic()` (outside one, the queued statements would commit together at the end).
    A plain block on other databases."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        yield
        return
    if not connection.in_atomic_block:
        raise RuntimeError("portal.db.pipeline() must run inside transaction.atomic().")
    with _psycopg_pipeline(connection):
        yield


@contextmanager
def atomic_pipelined(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """`transaction.atomic()` + `pipeline()` for a short write transaction whose COMMIT travels with
    its last statements instead of costing a round trip of its own (PostgreSQL, outermost block).

    The block's statements are sent without waiting (a result read inside the block waits as
    usual); at its end COMMIT is queued behind them and one round trip brings every result back.
    Django's own commit then finds the transaction ended and sends nothing, and the on_commit
    callbacks run as after `atomic()`. An error of any statement, the COMMIT's included (a deferred
    foreign key), is raised as Django's exception and nothing is committed. The block must end the
    transaction: nested in another one, or on another database, it is `atomic()` + `pipeline()`."""
    connection = connections[using]
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        with transaction.atomic(using=using), pipeline(using):
            yield
        return
    with transaction.atomic(using=using), commit_pipelined(using):
        yield


@contextmanager
def commit_pipelined(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """The last statements of the outermost `transaction.atomic()` block, with its COMMIT queued
    behind them (PostgreSQL): one round trip brings every result back, and Django's own commit at the
    end of the block then finds the transaction ended (its on_commit callbacks run as usual). The
    block must be the last thing in the atomic block. In a nested block (a savepoint, a test's
    transaction) it is `pipeline()` alone; on other databases a plain block."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        yield
        return
    if not connection.in_atomic_block:
        raise RuntimeError("portal.db.commit_pipelined() must end a transaction.atomic() block.")
    if connection.savepoint_ids or not connection.commit_on_exit:  # not the outermost block
        with _psycopg_pipeline(connection):
            yield
        return
    with _psycopg_pipeline(connection):
        yield
        raw = connection.connection
        # IDLE: the block ran no statement, there is no transaction to commit
        if raw.pgconn.transaction_status != TransactionStatus.IDLE:
            raw.cursor().execute(b"COMMIT", prepare=False)


@contextmanager
def _psycopg_pipeline(connection: Any) -> Iterator[None]:
    """psycopg's pipeline mode on a Django PostgreSQL connection, its errors raised as Django's."""
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield


@cache
def _sequence(using: str, table: str, column: str) -> str:
    """The name of the sequence behind `table`'s primary key (looked up once per process)."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, %s)", [table, column])
        return str(cursor.fetchone()[0])


def insert(obj: Model, using: str = DEFAULT_DB_ALIAS) -> None:
    """`obj.save(force_insert=True)` for a new row, with its INSERT statement built once per model and
    column set instead of compiled by the ORM on every call (three of them cost a codespace submit
    more CPU than PostgreSQL spent on them). Same field preparation (`pre_save`, auto_now_add,
    `get_db_prep_save`), except where it provably changes nothing (`_passthrough`); the primary key
    read back with RETURNING. Models with parents, with save signal receivers, or with database-side
    defaults or expressions go through `save()`."""
    model = type(obj)
    meta = model._meta
    if (
        meta.parents
        or signals.pre_save.has_listeners(model)
        or signals.post_save.has_listeners(model)
        or not obj._state.adding
    ):
        obj.save(force_insert=True, using=using)
        return
    connection = connections[using]
    sql, plan = _insert_plan(using, model, obj.pk is None)
    params = []
    for field, plain_read, passthrough in plan:
        value = getattr(obj, field.attname) if plain_read else field.pre_save(obj, True)
        if passthrough is not None and (
            isinstance(value, str) if passthrough is str else type(value) is passthrough
        ):
            params.append(value)
            continue
        if hasattr(value, "resolve_expression"):
            obj.save(force_insert=True, using=using)
            return
        params.append(field.get_db_prep_save(value, connection))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if obj.pk is None:
            obj.pk = meta.pk.to_python(cursor.fetchone()[0])
    obj._state.adding = False
    obj._state.db = using


# Django's own field classes whose `get_db_prep_save` returns a value of this type unchanged (ints:
# exactly int, not bool or IntEnum; strings: any str, enum members of TextChoices included, which
# CharField.to_python returns as they are). Subclasses may override preparation: not listed.
_PASSTHROUGH: dict[type[Field[Any, Any]], type] = {
    **dict.fromkeys(
        (
            models.AutoField,
            models.BigAutoField,
            models.SmallAutoField,
            models.IntegerField,
            models.BigIntegerField,
            models.SmallIntegerField,
            models.PositiveIntegerField,
            models.PositiveBigIntegerField,
            models.PositiveSmallIntegerField,
        ),
        int,
    ),
    **dict.fromkeys((models.CharField, models.TextField, models.SlugField), str),
    models.BooleanField: bool,
}


def _passthrough(field: Any) -> type | None:
    """The type of the values this field sends to the database as they are, or None."""
    if type(field) in (models.ForeignKey, models.OneToOneField):
        field = field.target_field
    return _PASSTHROUGH.get(type(field))


@cache
def _insert_plan(
    using: str, model: type[Model], pk_from_database: bool
) -> tuple[str, tuple[tuple[Any, bool, type | None], ...]]:
    """The INSERT of `model` and, per column, (field, whether `pre_save` is a plain attribute read,
    the type sent unchanged)."""
    fields = [
        f for f in model._meta.local_concrete_fields if not (f.primary_key and pk_from_database)
    ]
    plan = tuple((f, type(f).pre_save is Field.pre_save, _passthrough(f)) for f in fields)
    return _insert_sql(using, model, tuple(f.column for f in fields)), plan


@cache
def _insert_sql(using: str, model: type[Model], columns: tuple[str, ...]) -> str:
    quote = connections[using].ops.quote_name
    meta = model._meta
    return (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(c) for c in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))}) RETURNING {quote(meta.pk.column)}"
    )


def fast_datetimes(cursor: Any) -> Any:
    """Let this cursor (a Django cursor of a PostgreSQL connection) load `timestamptz` columns with
    psycopg's C loader, when that gives exactly what Django's loader gives: the session time zone
    is UTC and Django wants `datetime.timezone.utc`. Django registers its own loader (a Python
    subclass that re-parses every value in Python and then sets tzinfo): on a 20-row list page that
    was a tenth of the request's CPU. Returns the cursor."""
    connection = cursor.db
    if (
        connection.vendor != "postgresql"
        or connection.timezone is not dt.UTC
        or connection.connection.info.parameter_status("TimeZone") != "UTC"
    ):
        return cursor
    loader = _c_timestamptz_loader()
    if loader is not None:
        cursor.cursor.adapters.register_loader("timestamptz", loader)
    return cursor


@cache
def _c_timestamptz_loader() -> Any:
    """psycopg's own (C, when psycopg[binary] is installed) text loader for timestamptz, or None."""
    import psycopg
    from psycopg.pq import Format

    oid = psycopg.adapters.types["timestamptz"].oid
    return psycopg.adapters.get_loader(oid, Format.TEXT)
