"""The reason of an operator delete in the API: DELETE carries it as `?reason=` (or a JSON body
`{"reason": ...}`); the rule is `portal.operator_log.clean_reason` (trimmed, bounded, required where the
delete stops someone else's work), so a missing or bad one is a 400 naming `reason`."""

from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request

from portal.operator_log import MAX_REASON_LENGTH, clean_reason


def reason_parameter(*, required: bool) -> OpenApiParameter:
    need = "Required" if required else "Optional"
    return OpenApiParameter(
        "reason",
        OpenApiTypes.STR,
        OpenApiParameter.QUERY,
        required=False,
        description=(
            f"{need}: why (at most {MAX_REASON_LENGTH} characters); kept in the operators' activity "
            'log. A JSON body {"reason": ...} works too.'
        ),
    )


def request_reason(request: Request, *, required: bool) -> str:
    """The request's reason (body first, then the query string), cleaned; InvalidInput naming
    `reason` when it is not text, too long, or (`required`) empty."""
    raw: object = None
    if isinstance(request.data, Mapping):
        raw = request.data.get("reason")
    if raw is None:
        raw = request.query_params.get("reason")
    return clean_reason(raw, required=required)
