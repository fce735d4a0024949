"""Pagination: cursor pagination with a client-chosen `limit` (default 50, at most 500)."""

from __future__ import annotations

from typing import Any

from rest_framework.pagination import CursorPagination


class LimitCursorPagination(CursorPagination):
    """`?limit=N&cursor=...`. Ordered by `-id` unless the view sets `ordering`; stable under inserts."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500
    ordering = "-id"


class NewestFirstCursorPagination(LimitCursorPagination):
    """`LimitCursorPagination` that always orders by `-id`, whatever `ordering` the view declares
    for its list: for a detail action's log (a quota's history), where `?ordering=` does not apply."""

    def get_ordering(self, request: Any, queryset: Any, view: Any) -> tuple[str, ...]:
        return ("-id",)
