"""`?dry_run=1` on operator actions: answer what the action would do, change nothing."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from portal.errors import InvalidInput
from portal.operator_log import ActionImpact

DRY_RUN_PARAMETER = OpenApiParameter(
    "dry_run",
    OpenApiTypes.BOOL,
    OpenApiParameter.QUERY,
    description="1/true: answer the impact (what would be requeued, which teams), change nothing.",
)
_TRUE = {"1", "true", "yes"}
_FALSE = {"", "0", "false", "no"}


def dry_run_requested(request: Request) -> bool:
    """Whether the caller asked for a dry run; InvalidInput naming `dry_run` for anything else."""
    raw = request.query_params.get("dry_run", "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    message = "Use 1 or true for a dry run, 0 or false (or leave it out) to act."
    raise InvalidInput(f"dry_run: {message}", fields={"dry_run": [message]})


def dry_run_response(action: str, impact: ActionImpact) -> Response:
    return Response({"dry_run": True, "action": action, "impact": impact.as_json()})
