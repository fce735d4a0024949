"""Optimistic concurrency for updates: ETag = the row's `version`; writes need a matching If-Match.

Two operators editing the same quota cannot lose an update: the second PATCH/PUT carries the ETag it read,
which no longer matches, and gets 412 with the current version. A write without If-Match gets 428.
The model needs a positive integer `version` field, incremented by the service on every change
(compare-and-set: `filter(pk=..., version=expected).update(..., version=F("version") + 1)`).
"""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from portal.errors import DomainError, PreconditionFailed
from portal.numbers import parse_int


class PreconditionRequired(DomainError):
    code = "precondition_required"
    http_status = 428


def etag_for(version: int) -> str:
    return f'"{version}"'


def expected_version(request: Request) -> int:
    """The version named by the request's If-Match header (raises 428 without one, 412 when malformed)."""
    header = request.headers.get("If-Match", "").strip()
    if not header:
        raise PreconditionRequired(
            "Send the ETag you read in an If-Match header, so concurrent edits cannot overwrite each other.",
            fields={"If-Match": ["This header is required for updates."]},
        )
    value = header.removeprefix("W/").strip('"')
    if parse_int(value, minimum=0) is None:
        raise PreconditionFailed(
            f"If-Match {header!r} is not an ETag this API issued.",
            fields={"If-Match": ['Expected a quoted version number, e.g. "3".']},
        )
    return int(value)


def version_conflict(current: int) -> PreconditionFailed:
    return PreconditionFailed(
        f"The object changed since you read it (now version {current}); re-read it and apply your edit again.",
        fields={"If-Match": [f"Stale: current ETag is {etag_for(current)}."]},
        headers={"ETag": etag_for(current)},
    )


class ETagMixin:
    """Adds `ETag: "<version>"` to single-object GET responses of a DRF viewset."""

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response: Response = super().retrieve(request, *args, **kwargs)  # type: ignore[misc]
        version = response.data.get("version") if isinstance(response.data, dict) else None
        if version is not None:
            response["ETag"] = etag_for(int(version))
        return response
