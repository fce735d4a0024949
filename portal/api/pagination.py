"""Pagination: cursor pagination with a client-chosen `limit` (default 50, at most 500)."""

from __future__ import annotations

import binascii
from base64 import b64decode
from typing import Any
from urllib import parse

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Field, Model
from rest_framework.pagination import Cursor, CursorPagination

from portal.errors import InvalidInput

INVALID_CURSOR = "Not a cursor of this list: follow the `next` or `previous` link of a page."


def _invalid_cursor() -> InvalidInput:
    return InvalidInput.for_field("cursor", INVALID_CURSOR)


def _ordering_field(model: type[Model], ordering: str) -> Field[Any, Any] | None:
    """The model field behind an ordering term (`-created_at`, `quota__name`); None when it is not one."""
    names = ordering.lstrip("-").split("__")
    field: Any = None
    for name in names:
        try:
            field = model._meta.get_field(name)
        except FieldDoesNotExist:
            return None
        if field.is_relation and field.related_model is not None and name != names[-1]:
            model = field.related_model
    return field if isinstance(field, Field) else None


class LimitCursorPagination(CursorPagination):
    """`?limit=N&cursor=...`. Ordered by `-id` unless the view sets `ordering`; stable under inserts.

    A cursor is the client's input like any other: one this pagination could not have handed out (not
    base64, not our `o`/`r`/`p` tokens, an offset past the cutoff, a position the ordering field cannot
    hold) is a 400 naming `cursor`, never a 404 or a database error (issue 38)."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500
    ordering = "-id"

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request: Any) -> Cursor | None:
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            querystring = b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
            tokens = parse.parse_qs(querystring, keep_blank_values=True, strict_parsing=True)
            offset = int(tokens.get("o", ["0"])[0])
            reverse = bool(int(tokens.get("r", ["0"])[0]))
        except (TypeError, ValueError, binascii.Error) as exc:
            raise _invalid_cursor() from exc
        # next/previous links carry at most the cutoff plus one page of rows that share a position
        if not 0 <= offset <= self.offset_cutoff + self.max_page_size:
            raise _invalid_cursor()
        position = tokens.get("p", [None])[0]
        if position is not None:
            self._check_position(position)
        # DRF keeps the position as the string it encoded (its stubs say int)
        return Cursor(offset=min(offset, self.offset_cutoff), reverse=reverse, position=position)  # type: ignore[arg-type]

    def _check_position(self, position: str) -> None:
        """The position is compared with the first ordering field in SQL: it must be a value of it."""
        if "\x00" in position:
            raise _invalid_cursor()
        field = _ordering_field(self._model, self.ordering[0])
        if field is None:
            return
        try:
            field.run_validators(field.to_python(position))
        except (DjangoValidationError, TypeError, ValueError) as exc:
            raise _invalid_cursor() from exc


class NewestFirstCursorPagination(LimitCursorPagination):
    """`LimitCursorPagination` that always orders by `-id`, whatever `ordering` the view declares
    for its list: for a detail action's log (a quota's history), where `?ordering=` does not apply."""

    def get_ordering(self, request: Any, queryset: Any, view: Any) -> tuple[str, ...]:
        return ("-id",)
