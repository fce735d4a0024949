"""`GET /api/v1/reclaim-notices/`: the reclaim-notices board across groups (quotas.notice_board).

Operators see every notice, everyone else the notices of their teams' quotas. Filters are query
parameters (`state`, `group`, `quota`, `limit`, `cursor`); a bad one is a 400 naming it. Pages are
cursor pages with the body of the other list endpoints ({next, previous, results}); the board's order
is live by deadline, then closed newest first, so a cursor is a keyset position in that order, not an
id.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from quotas.api.reclaim import ReclaimNoticeSerializer
from quotas.notice_board import (
    MAX_BOARD_LIMIT,
    BoardPosition,
    BoardState,
    board_page,
    board_query,
    board_summary,
    query_params,
)

BAD_FILTER = OpenApiResponse(description="Invalid filter: {error: {code, message, fields}}")

FILTERS = [
    OpenApiParameter(
        "state",
        str,
        enum=[s.value for s in BoardState],
        required=False,
        description="live = noticed and not closed yet; closed = executed or cancelled; "
        "all (default).",
    ),
    OpenApiParameter(
        "group",
        str,
        required=False,
        description="A quota group's name or id (one you hold a quota in, unless an operator).",
    ),
    OpenApiParameter(
        "quota",
        int,
        required=False,
        description="A quota's id: its work given notice and work stopped for it.",
    ),
]
PAGING = [
    OpenApiParameter(
        "limit",
        int,
        required=False,
        description=f"Rows per page (default 50, 1-{MAX_BOARD_LIMIT}).",
    ),
    OpenApiParameter(
        "cursor", str, required=False, description="From a page's `next` or `previous` link."
    ),
]


class ReclaimNoticePageSerializer(serializers.Serializer):
    next = serializers.URLField(allow_null=True, help_text="The following page (null: last).")
    previous = serializers.URLField(allow_null=True, help_text="The page before (null: first).")
    results = ReclaimNoticeSerializer(many=True)


class GroupNoticeSummarySerializer(serializers.Serializer):
    group_id = serializers.IntegerField()
    group = serializers.CharField()
    live_notices = serializers.IntegerField()
    workloads = serializers.IntegerField(help_text="Workloads under notice.")
    gpus = serializers.FloatField(help_text="GPUs those workloads hold now.")
    soonest_deadline = serializers.DateTimeField(allow_null=True)
    seconds_left = serializers.IntegerField(allow_null=True)
    delivery_failures = serializers.IntegerField(
        help_text="Live notices whose signal or checkpoint hook failed."
    )


class ReclaimNoticeSummarySerializer(serializers.Serializer):
    live_notices = serializers.IntegerField()
    workloads = serializers.IntegerField()
    gpus = serializers.FloatField()
    soonest_deadline = serializers.DateTimeField(allow_null=True)
    seconds_left = serializers.IntegerField(allow_null=True)
    delivery_failures = serializers.IntegerField()
    groups = GroupNoticeSummarySerializer(many=True)


def _params(request: Request) -> dict[str, Any]:
    names = ("state", "group", "quota", "limit", "cursor")
    return {name: request.query_params.get(name, "") for name in names}


class _OnePageSchema(AutoSchema):
    """The list answers one page object ({next, previous, results}), not an array of them: the board
    pages itself (pagination_class None), so drf-spectacular must not wrap the response in a list."""

    def _is_list_view(self, serializer: Any = None) -> bool:
        return False


class ReclaimNoticeBoardViewSet(viewsets.GenericViewSet):
    schema = _OnePageSchema()
    """The reclaim plan across groups (what, whose, when): every notice the caller may see."""

    serializer_class = ReclaimNoticeSerializer
    pagination_class = None  # keyset pages on the board's own order (quotas.notice_board)
    filter_backends: list[Any] = []

    @extend_schema(
        parameters=[*FILTERS, *PAGING],
        responses={200: ReclaimNoticePageSerializer, 400: BAD_FILTER},
        description="Reclaim notices across groups: live ones first (soonest deadline first), then "
        "closed ones (newest first). Operators see all; others the notices of their teams' quotas.",
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        query = board_query(request.user, **_params(request))
        page = board_page(request.user, query)
        base = request.build_absolute_uri(request.path)

        def link(position: BoardPosition | None) -> str | None:
            if position is None:
                return None
            params = {**query_params(query), "limit": str(query.limit), "cursor": position.encode()}
            return f"{base}?{urlencode(params)}"

        return Response(
            {
                "next": link(page.next_position),
                "previous": link(page.previous_position),
                "results": page.rows,
            }
        )

    @extend_schema(
        parameters=FILTERS,
        responses={200: ReclaimNoticeSummarySerializer, 400: BAD_FILTER},
        description="Totals of the live notices (the `state` filter does not apply): notices, "
        "workloads and GPUs under notice, the soonest deadline and failed deliveries, per group.",
    )
    @action(detail=False, methods=["get"])
    def summary(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        params = _params(request)
        params.update(limit="", cursor="")
        query = board_query(request.user, **params)
        return Response(board_summary(request.user, query).as_json())
