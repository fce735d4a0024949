"""Request body parsing: a JSON object that the database can store, and at most so many bytes.

Every API endpoint takes a JSON object, and its values must survive the first database write, so
`load_json_object` refuses up front, with 400 naming the field at fault:
- a body that is not an object (`[]`, `"x"`, `null`);
- strings (values or keys) with a NUL character (PostgreSQL text and jsonb cannot hold one) or a lone
  UTF-16 surrogate (`"\\ud800"`: Python decodes it into a string that cannot be encoded as UTF-8);
- numbers that are not finite (`1e400` parses as infinity) or integers beyond a 64-bit database integer.
A body larger than `DATA_UPLOAD_MAX_MEMORY_SIZE` never gets here: Django refuses to read it, and the
API's exception handler answers 413 `request_too_large`.

`StrictJSONParser` applies this to every API endpoint (REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]); JSON
endpoints of the pages call `load_json_object` on `request.body` themselves.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from portal.errors import InvalidInput
from portal.numbers import BIGINT_MAX


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return "a number"


def _string_fault(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains invalid Unicode (a lone surrogate)"
    return None


def _value_fault(value: Any) -> str | None:
    if isinstance(value, str):
        return _string_fault(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > BIGINT_MAX:
        return f"is out of range (at most {BIGINT_MAX} either side of 0)"
    return None


def _first_fault(value: Any, path: str) -> tuple[str, str] | None:
    """(path, reason) of the first value under `value` the database could not store, or None."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                key_fault = _string_fault(key)
                if key_fault is not None:
                    return where, f"a key {key_fault}"
                stack.append((child, f"{where}.{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
        else:
            fault = _value_fault(item)
            if fault is not None:
                return where, fault
    return None


def check_json_object(data: Any) -> dict[str, Any]:
    """`data` (decoded JSON) if it is an object the database can store; InvalidInput naming the field
    (the top-level key; the message gives the whole path) otherwise."""
    if not isinstance(data, dict):
        message = f"Send a JSON object, not {_json_type(data)}."
        raise InvalidInput(
            f"request: {message}", code="parse_error", fields={"non_field_errors": [message]}
        )
    for key, value in data.items():
        key_fault = _string_fault(key)
        if key_fault is not None:
            message = f"A field name {key_fault}."
            raise InvalidInput(
                f"request: {message}", code="parse_error", fields={"non_field_errors": [message]}
            )
        fault = _first_fault(value, key)
        if fault is not None:
            where, reason = fault
            raise InvalidInput(
                f"{where}: {reason}.", code="parse_error", fields={key: [f"{where} {reason}."]}
            )
    return data


def load_json_object(body: bytes) -> dict[str, Any]:
    """The JSON object in `body` (empty: {}), checked by `check_json_object`; InvalidInput otherwise."""
    if not body:
        return {}
    try:
        data = json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(
            f"request: the body is not valid JSON ({exc}).",
            code="parse_error",
            fields={"non_field_errors": ["The body is not valid JSON."]},
        ) from exc
    return check_json_object(data)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class StrictJSONParser(JSONParser):
    """DRF's JSONParser, refusing what `check_json_object` refuses (400 naming the field) and JSON
    nested too deeply for Python's parser."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - the body is nested too deeply.") from exc
        return check_json_object(data)
