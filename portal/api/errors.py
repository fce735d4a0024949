"""One error body for the whole API: {"error": {"code": ..., "message": ..., "fields": {...}}}.

Domain errors raised by services (`portal.errors.DomainError` subclasses) map to their HTTP status here, so
views never translate exceptions themselves. Django's ValidationError becomes a 400 with field errors.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.errors import DomainError


def _flatten(detail: Any) -> Any:
    if isinstance(detail, dict):
        return {key: _flatten(value) for key, value in detail.items()}
    if isinstance(detail, list):
        flat = [_flatten(item) for item in detail]
        if all(isinstance(item, str) for item in flat):
            return flat
        return flat
    return str(detail)


def error_body(code: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def _message_for_fields(fields: dict[str, Any]) -> str:
    parts = []
    for name, errors in fields.items():
        text = errors[0] if isinstance(errors, list) and errors else errors
        if isinstance(text, dict):
            text = "invalid"
        label = "request" if name in ("non_field_errors", "__all__") else name
        parts.append(f"{label}: {text}")
    return "; ".join(parts) or "Invalid input."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return Response(
            error_body(exc.code, exc.message, exc.fields),
            status=exc.http_status,
            headers=exc.headers,
        )
    if isinstance(exc, DjangoValidationError):
        fields = (
            {k: [str(m) for m in v] for k, v in exc.message_dict.items()}
            if hasattr(exc, "error_dict")
            else {"non_field_errors": [str(m) for m in exc.messages]}
        )
        fields = {("non_field_errors" if k == "__all__" else k): v for k, v in fields.items()}
        return Response(
            error_body("invalid", _message_for_fields(fields), fields),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(
            error_body("request_too_large", f"The request body is over {limit} bytes."),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(
            exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        )
        response.data = error_body("invalid", _message_for_fields(fields), fields)
    else:
        detail: Any = getattr(exc, "detail", str(exc))
        code = getattr(detail, "code", None) or getattr(exc, "default_code", "error")
        response.data = error_body(str(code), str(detail))
    return response
