"""drf-spectacular extensions: document the Bearer token scheme."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "portal.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token: `Authorization: Bearer tsr_...` (create one at /account/tokens/).",
        }


ERROR_COMPONENT = "Error"
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The one error body of the API.",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "Stable, machine-readable reason."},
                "message": {"type": "string", "description": "A sentence for people."},
                "fields": {
                    "type": "object",
                    "description": "Input name → reasons (nested for nested input).",
                    "additionalProperties": True,
                },
            },
            "required": ["code", "message", "fields"],
        }
    },
    "required": ["error"],
}
_DESCRIPTIONS = {
    "400": "Invalid input (`invalid`), or a body no field can store (`parse_error`), with `fields`.",
    "413": "`request_too_large`: the body is over DATA_UPLOAD_MAX_MEMORY_SIZE bytes.",
    "401": "Missing, invalid, expired or revoked credentials.",
    "403": "Authenticated but not allowed (e.g. an operator-only action).",
    "404": "No such object, or it belongs to another tenant.",
    "409": "Conflict: illegal state transition, name clash, or `idempotency_in_progress` (Retry-After).",
    "412": "If-Match names a stale version (`precondition_failed`); the current ETag is returned.",
    "422": "`idempotency_key_reused`: this Idempotency-Key was used with another request body.",
    "428": "If-Match is required for this update (`precondition_required`).",
    "429": "`rate_limited`: per-token or per-tenant limit reached; see Retry-After.",
    "503": "`busy`: the change kept losing lock races with concurrent ones; nothing was changed; "
    "retry after Retry-After.",
}
_COMMON = ("400", "401", "403", "404", "429")
_BY_METHOD = {
    "post": ("409", "413", "422", "503"),
    "put": ("409", "412", "413", "428", "503"),
    "patch": ("409", "412", "413", "428", "503"),
    "delete": ("409", "412", "503"),
}


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> Any:
    """drf-spectacular postprocessing hook: every operation documents the shared error body for the
    statuses the API layer itself can produce (auth, scoping, validation, limits, idempotency,
    concurrency), so clients and schemathesis know every status an endpoint may answer."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components[ERROR_COMPONENT] = ERROR_SCHEMA
    ref = {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            responses = operation.setdefault("responses", {})
            for status in (*_COMMON, *_BY_METHOD.get(method, ())):
                responses.setdefault(
                    status,
                    {
                        "description": _DESCRIPTIONS[status],
                        "content": {"application/json": {"schema": ref}},
                    },
                )
            if method == "post":
                parameters = operation.setdefault("parameters", [])
                if not any(p.get("name") == "Idempotency-Key" for p in parameters):
                    parameters.append(
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "description": "Send a unique key (e.g. a UUID) to make retries safe: a "
                            "retry with the same key and body returns the first response.",
                            "schema": {
                                "type": "string",
                                "minLength": 1,
                                "maxLength": 255,
                                "pattern": "^[!-~]+$",
                            },
                        }
                    )
    return result
