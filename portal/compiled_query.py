"""Querysets compiled to SQL once per *shape* and run with each request's values.

On a hot list endpoint Django spent more CPU compiling the page query (joins, forty columns, filters)
than PostgreSQL spent running it, and a submit compiled a dozen small reads. `CompiledQuerySet` wraps a
template queryset (`Codespace.objects.values(...)` for dict rows, or a model queryset, select_related
allowed, for instances built as Django builds them) and records what the request applies to it: `filter()`, `exclude()`,
`order_by()`, `select_for_update()`, `none()`, slicing and `first()`, the vocabulary of tenant scoping, the filter backends and DRF's
cursor pagination. When iterated it looks up the SQL for this *shape* (the operations with their values
abstracted away: which lookups, how many values in an `__in`, which ordering, which slice) and runs it
with this request's values; a new shape is compiled once, by replaying the operations on the template
with unique sentinel values and finding where each sentinel landed among the compiled parameters.

It refuses to guess. A shape is served from its compiled SQL only when every sentinel came out as a
parameter unchanged (or an int from a string of digits, as for cursor positions of integer columns), no
parameter merely contains one; Django's column converters are applied to the rows as its compiler
would. Any other shape is evaluated by replaying the operations with the real values: the plain ORM.
Values that are not ints or strings (None, booleans, dates) are part of the shape, not parameters.

Kept because it pays (docs/architecture.md "The private query layer"): on PostgreSQL, the web tier's CPU
per request, measured in-process by `bench/api_cost.py --requests 500` with this layer on and with
`--off compiled` (every shape evaluated by the plain ORM), one process each on the same seeded database:
list 5.0-5.6 ms vs 8.7 ms, submit 10.8-12.0 ms vs 17.2 ms, i.e. about 1.5x the requests per core. On
SQLite the same querysets run through the same code (only `portal.db.run_together` sends them one by
one); the statement counts are held on both by `codespaces/tests/test_api_perf.py` and
`tests/api/test_query_counts.py`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from threading import Lock
from typing import Any, cast

from django.core.exceptions import EmptyResultSet, FullResultSet, ValidationError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Q, QuerySet
from django.db.models.query import (  # type: ignore[attr-defined]
    ModelIterable,
    ValuesIterable,
    get_related_populators,
)

from portal.db import Statement, run_together

# Two sets of sentinel numbers, inside every integer column's range (Django drops or empties lookups
# whose value a column cannot hold, and that would not be this request's query). A shape is compiled
# with both and kept only if both agree: a constant that happens to equal a sentinel is caught.
_SENTINEL_BASES = (23_000, 29_000)
_MAX_SLOTS = 3_000
_MAX_SHAPES = 256


@dataclass(frozen=True)
class _Slot:
    """A bound value's place in a shape, by kind: "int", "digits" (a string of digits) or "str"."""

    kind: str


@dataclass(frozen=True)
class _Seq:
    items: tuple[Hashable, ...]


@dataclass(frozen=True)
class _Lit:
    """A value that is part of the shape itself (None, a boolean, a date, ...)."""

    value: Hashable


@dataclass(frozen=True)
class _QShape:
    connector: str
    negated: bool
    children: tuple[Hashable, ...]  # _QShape or (lookup, value shape)


@dataclass(frozen=True)
class _Call:
    """One recorded `filter()` / `exclude()`: positional Q shapes and keyword value shapes."""

    args: tuple[Hashable, ...]
    kwargs: tuple[tuple[str, Hashable], ...]


@dataclass(frozen=True)
class _Compiled:
    sql: str
    # per SQL parameter: ("value", index into the bound values, to_int) or ("const", value, False)
    params: tuple[tuple[str, Any, bool], ...]
    names: tuple[str, ...]  # values() templates: the row keys
    # model templates: how Django's ModelIterable turns a row into instances (select_related too)
    model: tuple[Any, ...] | None
    # Django's per-column value converters ({position: (functions, expression)}; SQLite datetimes,
    # numeric subqueries), applied as the compiler would
    converters: dict[int, Any] = field(default_factory=dict)
    empty: bool = False


_UNCOMPILABLE = object()
_cache: OrderedDict[Hashable, Any] = OrderedDict()
_lock = Lock()


def _kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "digits" if value.isascii() and value.isdigit() and len(value) < 19 else "str"
    return None


def _sentinel(kind: str, index: int, base: int) -> Any:
    number = base + index
    if kind == "int":
        return number
    if kind == "digits":
        return str(number)  # still digits; an integer column turns it into int(...)
    return f"\x1ftessera-sentinel-{base}-{index}\x1f"


class _Abstractor:
    """Splits an operation's arguments into a hashable shape and the values it binds, in order."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def value(self, value: Any) -> Hashable:
        if _kind(value) is not None:
            self.values.append(value)
            return _Slot(str(_kind(value)))
        if isinstance(value, list | tuple):
            return _Seq(tuple(self.value(item) for item in value))
        if isinstance(value, set | frozenset):
            return _Seq(tuple(self.value(item) for item in sorted(value, key=repr)))
        hash(value)  # part of the shape; an unhashable value raises TypeError here, loudly
        return _Lit(value)

    def q(self, q: Q) -> _QShape:
        children = tuple(
            self.q(child) if isinstance(child, Q) else self.lookup(*cast(tuple[str, Any], child))
            for child in q.children
        )
        return _QShape(q.connector, q.negated, children)

    def lookup(self, name: str, value: Any) -> tuple[str, Hashable]:
        return (name, self.value(value))

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
        shaped_args = tuple(self.q(arg) for arg in args)
        shaped_kwargs = tuple((k, self.value(v)) for k, v in sorted(kwargs.items()))
        return _Call(shaped_args, shaped_kwargs)


def _fill_child(child: Hashable, source: Iterator[Any]) -> Any:
    if isinstance(child, _QShape):
        return _fill(child, source)
    lookup, value = cast(tuple[str, Hashable], child)
    return (lookup, _fill(value, source))


def _fill(shape: Hashable, source: Iterator[Any]) -> Any:
    """Rebuild an argument from its shape, taking the bound values (real or sentinel) from `source`."""
    if isinstance(shape, _Slot):
        return next(source)
    if isinstance(shape, _Seq):
        return [_fill(item, source) for item in shape.items]
    if isinstance(shape, _Lit):
        return shape.value
    if isinstance(shape, _QShape):
        q = Q()
        q.connector, q.negated = shape.connector, shape.negated
        q.children = [_fill_child(child, source) for child in shape.children]
        return q
    raise AssertionError(f"unknown shape {shape!r}")


class CompiledQuerySet:
    """A template queryset plus recorded operations; see the module docstring.

    `name` identifies the template (one template per name); `model` is the template's model, for code
    that inspects it (filter backends, ordering validation)."""

    def __init__(
        self,
        name: str,
        template: QuerySet[Any],
        ops: tuple[tuple[str, Hashable], ...] = (),
        values: tuple[Any, ...] = (),
        using: str = DEFAULT_DB_ALIAS,
    ) -> None:
        values_rows = issubclass(template._iterable_class, ValuesIterable)
        model_rows = template._iterable_class is ModelIterable
        if not (values_rows or model_rows):
            raise TypeError("The template of a CompiledQuerySet is a values() or a model queryset.")
        internals: Any = template  # Django keeps these private
        if internals._prefetch_related_lookups or internals._known_related_objects:
            raise TypeError("A CompiledQuerySet template cannot prefetch related objects.")
        self._values_rows = values_rows
        self.name = name
        self.template = template
        self.model = template.model
        self._ops = ops
        self._values = values
        self._using = using
        self._rows: list[Any] | None = None

    # --- recording -------------------------------------------------------------------------------
    def _with(self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CompiledQuerySet:
        if any(not isinstance(arg, Q) for arg in args):
            raise TypeError(f"{op}() takes Q objects and keyword lookups only.")
        abstract = _Abstractor()
        shape = abstract.call(args, kwargs)
        return CompiledQuerySet(
            self.name,
            self.template,
            (*self._ops, (op, shape)),
            (*self._values, *abstract.values),
            self._using,
        )

    def filter(self, *args: Any, **kwargs: Any) -> CompiledQuerySet:
        return self._with("filter", args, kwargs)

    def exclude(self, *args: Any, **kwargs: Any) -> CompiledQuerySet:
        return self._with("exclude", args, kwargs)

    def order_by(self, *fields: str) -> CompiledQuerySet:
        return CompiledQuerySet(
            self.name,
            self.template,
            (*self._ops, ("order_by", tuple(fields))),
            self._values,
            self._using,
        )

    def select_for_update(self, **options: Any) -> CompiledQuerySet:
        """Lock the rows (`of`, `nowait`, `skip_locked` as in Django); structural."""
        shape = tuple(
            sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items())
        )
        return CompiledQuerySet(
            self.name,
            self.template,
            (*self._ops, ("select_for_update", shape)),
            self._values,
            self._using,
        )

    def first(self) -> Any:
        """The first row (by primary key unless ordered), or None, as `QuerySet.first()`."""
        return next(iter(self.head()), None)

    def head(self) -> CompiledQuerySet:
        """The queryset of `first()`'s row (at most one): to evaluate together with others."""
        ordered = self.template.ordered or any(op == "order_by" for op, _ in self._ops)
        queryset = self if ordered else self.order_by("pk")
        return queryset[:1]

    def none(self) -> CompiledQuerySet:
        return CompiledQuerySet(
            self.name, self.template, (*self._ops, ("none", ())), self._values, self._using
        )

    def __getitem__(self, item: slice) -> CompiledQuerySet:
        if not isinstance(item, slice) or item.step is not None:
            raise TypeError("CompiledQuerySet supports slices without a step only.")
        bounds = (item.start, item.stop)
        return CompiledQuerySet(
            self.name, self.template, (*self._ops, ("slice", bounds)), self._values, self._using
        )

    # --- evaluation ------------------------------------------------------------------------------
    def queryset(self, values: tuple[Any, ...] | None = None) -> QuerySet[Any]:
        """The equivalent Django queryset, with these values (default: the recorded ones)."""
        source = iter(self._values if values is None else values)
        queryset = self.template
        for op, shape in self._ops:
            if op == "slice":
                assert isinstance(shape, tuple)
                queryset = queryset[slice(*shape)]
            elif op == "order_by":
                assert isinstance(shape, tuple)
                queryset = queryset.order_by(*shape)
            elif op == "none":
                queryset = queryset.none()
            elif op == "select_for_update":
                assert isinstance(shape, tuple)
                queryset = queryset.select_for_update(**dict(shape))
            else:
                assert isinstance(shape, _Call)
                args = [_fill(a, source) for a in shape.args]
                kwargs = {k: _fill(v, source) for k, v in shape.kwargs}
                queryset = getattr(queryset, op)(*args, **kwargs)
        return queryset

    def _compile(self) -> Any:
        """The shape's SQL and where each value goes, or _UNCOMPILABLE (evaluate it plainly)."""
        if any(op == "none" for op, _ in self._ops):
            return _Compiled("", (), (), None, empty=True)
        if len(self._values) > _MAX_SLOTS:
            return _UNCOMPILABLE
        first, second = (self._compile_with(base) for base in _SENTINEL_BASES)
        if first is _UNCOMPILABLE or second is _UNCOMPILABLE:
            return _UNCOMPILABLE
        if (first.sql, first.params) != (second.sql, second.params):
            return _UNCOMPILABLE  # a value changed the SQL or a constant looked like a sentinel
        return first

    def _compile_with(self, base: int) -> Any:
        kinds = [str(_kind(value)) for value in self._values]
        sentinels = tuple(_sentinel(kind, i, base) for i, kind in enumerate(kinds))
        try:
            queryset = self.queryset(sentinels)
            compiler = queryset.query.get_compiler(self._using)
            sql, params = compiler.as_sql()
            converters = compiler.get_converters([col for col, _, _ in compiler.select])
        except (EmptyResultSet, FullResultSet, ValidationError, ValueError, TypeError):
            # a sentinel does not fit a column, or decided the WHERE clause by itself
            return _UNCOMPILABLE
        by_value = {s: i for i, s in enumerate(sentinels)}
        by_int = {int(s): i for i, s in enumerate(sentinels) if kinds[i] == "digits"}
        placed: list[tuple[str, Any, bool]] = []
        seen: set[int] = set()
        for param in params:
            if isinstance(param, int | str) and not isinstance(param, bool):
                if type(param) is int and param in by_int:
                    placed.append(("value", by_int[param], True))
                    seen.add(by_int[param])
                    continue
                index = by_value.get(param)
                if index is not None and type(param) is type(sentinels[index]):
                    placed.append(("value", index, False))
                    seen.add(index)
                    continue
                if isinstance(param, str) and "tessera-sentinel" in param:
                    return _UNCOMPILABLE  # transformed (e.g. wrapped in %...%)
            placed.append(("const", param, False))
        if seen != set(range(len(sentinels))):
            return _UNCOMPILABLE
        query = queryset.query
        if self._values_rows:
            names = tuple(
                query.selected
                or (*query.extra_select, *query.values_select, *query.annotation_select)
            )
            return _Compiled(sql, tuple(placed), names, None, converters)
        klass_info = compiler.klass_info
        select_fields = klass_info["select_fields"]
        start, end = select_fields[0], select_fields[-1] + 1
        init_list = tuple(f[0].target.attname for f in compiler.select[start:end])
        model = (
            klass_info["model"],
            start,
            end,
            init_list,
            klass_info,
            compiler.select,
            dict(compiler.annotation_col_map or {}),
        )
        return _Compiled(sql, tuple(placed), (), model, converters)

    def _statement(self) -> tuple[_Compiled, list[Any]] | None:
        """The compiled shape and this request's parameters, or None: evaluate it with the ORM."""
        key = (self._using, self.name, self._ops, tuple(_kind(v) for v in self._values))
        with _lock:
            compiled = _cache.get(key)
            if compiled is not None:
                _cache.move_to_end(key)
        if compiled is None:
            compiled = self._compile()
            with _lock:
                _cache[key] = compiled
                while len(_cache) > _MAX_SHAPES:
                    _cache.popitem(last=False)
        if compiled is _UNCOMPILABLE:
            return None
        assert isinstance(compiled, _Compiled)
        params = [
            (int(self._values[ref]) if to_int else self._values[ref]) if where == "value" else ref
            for where, ref, to_int in compiled.params
        ]
        return compiled, params

    def _finish(self, compiled: _Compiled, rows: list[Any]) -> list[Any]:
        """Rows as iterating this queryset returns them: dicts or model instances."""
        if compiled.converters:
            connection = connections[self._using]
            rows = [_converted(row, compiled.converters, connection) for row in rows]
        if compiled.model is None:
            names = compiled.names
            return [dict(zip(names, row, strict=True)) for row in rows]
        return _instances(compiled.model, rows, self._using)

    def _fetch(self) -> list[Any]:
        prepared = self._statement()
        if prepared is None:
            return list(self.queryset())
        compiled, params = prepared
        if compiled.empty:
            return []
        return self._finish(compiled, run_together([(compiled.sql, params)], self._using)[0])

    def _evaluated(self) -> list[Any]:
        if self._rows is None:
            self._rows = self._fetch()
        return self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._evaluated())

    def __len__(self) -> int:
        return len(self._evaluated())


def evaluate_together(*items: CompiledQuerySet | Statement) -> list[list[Any]]:
    """Evaluate compiled querysets and plain statements (SQL, parameters) in this order, in one round
    trip where possible (`portal.db.run_together`): each queryset's rows as iterating it returns them,
    each statement's as tuples. Items run one after the other, each seeing what the ones before it
    did (a statement that locks a row can come first); if a queryset's shape does not compile, they
    all run one at a time, still in order. One database alias for all of them."""
    using = next((i._using for i in items if isinstance(i, CompiledQuerySet)), DEFAULT_DB_ALIAS)
    prepared = [item._statement() if isinstance(item, CompiledQuerySet) else None for item in items]
    if any(
        p is None for i, p in zip(items, prepared, strict=True) if isinstance(i, CompiledQuerySet)
    ):
        return [
            list(item) if isinstance(item, CompiledQuerySet) else run_together([item], using)[0]
            for item in items
        ]
    statements: list[Statement] = []
    for item, ready in zip(items, prepared, strict=True):
        if ready is None:
            statements.append(cast(Statement, item))
        elif not ready[0].empty:
            statements.append((ready[0].sql, ready[1]))
    rows = iter(run_together(statements, using))
    results: list[list[Any]] = []
    for item, ready in zip(items, prepared, strict=True):
        if ready is None:
            results.append(next(rows))
        elif ready[0].empty:
            results.append([])
        else:
            assert isinstance(item, CompiledQuerySet)
            item._rows = item._finish(ready[0], next(rows))
            results.append(item._rows)
    return results


def _instances(model: tuple[Any, ...], rows: list[Any], db: str) -> list[Any]:
    """Model instances from rows, as Django's ModelIterable builds them (select_related included)."""
    model_cls, start, end, init_list, klass_info, select, annotation_col_map = model
    populators = get_related_populators(klass_info, select, db)
    objects = []
    for row in rows:
        obj = model_cls.from_db(db, init_list, row[start:end])
        for populator in populators:
            populator.populate(row, obj)
        for attr_name, position in annotation_col_map.items():
            setattr(obj, attr_name, row[position])
        objects.append(obj)
    return objects


def _converted(row: tuple[Any, ...], converters: dict[int, Any], connection: Any) -> list[Any]:
    values = list(row)
    for position, (functions, expression) in converters.items():
        value = values[position]
        for function in functions:
            value = function(value, expression, connection)
        values[position] = value
    return values


def clear_cache() -> None:
    """Forget every compiled shape (tests; a schema change in a running process)."""
    with _lock:
        _cache.clear()
