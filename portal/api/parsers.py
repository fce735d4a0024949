"""Request body parsing for the API: JSON that the database can store.

JSON may escape lone UTF-16 surrogates (`"\\ud800"`); Python decodes them into strings that cannot be
encoded as UTF-8, so the first database write would fail with a 500. `StrictJSONParser` refuses such bodies
up front with 400 `parse_error`, for every endpoint (REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]).
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class StrictJSONParser(JSONParser):
    """DRF's JSONParser, refusing strings that are not valid Unicode (lone surrogates)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        if _has_lone_surrogate(data):
            raise ParseError(
                "JSON parse error - the body contains invalid Unicode (a lone surrogate)."
            )
        return data
