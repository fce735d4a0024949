"""Typed domain errors shared by the apps. Services raise them; the API and the UI map them once."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A refusal a user should understand. `code` is stable (clients branch on it), `message` is a
    sentence with the numbers, `fields` names the inputs at fault."""

    code = "error"
    http_status = 400

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        fields: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.fields = fields or {}
        self.headers = headers or {}


class InvalidInput(DomainError):
    code = "invalid"
    http_status = 400

    @classmethod
    def for_field(cls, name: str, message: str) -> InvalidInput:
        """The refusal of one field: "name: message", with the message under `fields[name]`."""
        return cls(f"{name}: {message}", fields={name: [message]})


class NotFoundError(DomainError):
    code = "not_found"
    http_status = 404


class Conflict(DomainError):
    """The state changed under the caller (illegal transition, stale version, name clash)."""

    code = "conflict"
    http_status = 409


class PreconditionFailed(DomainError):
    code = "precondition_failed"
    http_status = 412


class Forbidden(DomainError):
    code = "forbidden"
    http_status = 403


class RateLimited(DomainError):
    code = "rate_limited"
    http_status = 429


class Busy(DomainError):
    """The database kept losing lock races (deadlocks) for this request: nothing was changed; retry."""

    code = "busy"
    http_status = 503
