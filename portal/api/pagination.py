"""Pagination: cursor pagination with a client-chosen `limit` (default 50, at most 500)."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class LimitCursorPagination(CursorPagination):
    """`?limit=N&cursor=...`. Ordered by `-id` unless the view sets `ordering`; stable under inserts."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500
    ordering = "-id"
