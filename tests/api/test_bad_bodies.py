"""Bodies no endpoint can store are a 400 naming the field, on every write of the API (issue 11).

Built from the generated OpenAPI schema: every POST/PUT/PATCH operation on a collection (no path
parameter, so the body is read before any lookup) gets, as an operator, a body that is not a JSON object,
a number that is not finite, an integer beyond a 64-bit database integer and a NUL character in a nested
key and in a value. The shared parser (portal.api.parsers) refuses each with 400 `parse_error` naming the
top-level field, and nothing is written.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.apps import apps
from drf_spectacular.generators import SchemaGenerator

SCHEMA: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
WRITES = sorted(
    (path, method)
    for path, item in SCHEMA["paths"].items()
    for method, operation in item.items()
    if method in ("post", "put", "patch")
    and "requestBody" in operation
    and not re.search(r"{[^}]+}", path)
)

BAD_BODIES = [
    ("a list", "[]", "non_field_errors"),
    ("a string", '"x"', "non_field_errors"),
    ("null", "null", "non_field_errors"),
    ("infinity from a huge exponent", '{"gpu_count": 1e400}', "gpu_count"),
    ("an integer beyond 64 bits", '{"gpu_count": 99999999999999999999999}', "gpu_count"),
    ("NUL in a nested key", '{"node_labels": {"zone\\u0000": "a"}}', "node_labels"),
    ("NUL in a value", '{"name": "x\\u0000y"}', "name"),
    ("NUL in a list item", '{"whole_card_models": ["T4", "\\u0000"]}', "whole_card_models"),
]


def _rows() -> dict[str, int]:
    return {
        model._meta.label: model._default_manager.count()
        for app in ("codespaces", "quotas", "scheduling")
        for model in apps.get_app_config(app).get_models()
    }


def test_the_schema_has_collection_writes_to_probe() -> None:
    assert ("/api/v1/jobs/", "post") in WRITES
    assert len(WRITES) >= 5


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "method"), WRITES)
@pytest.mark.parametrize(("_case", "raw", "field"), BAD_BODIES)
def test_a_body_the_database_cannot_store_is_a_400_naming_the_field(
    path: str, method: str, _case: str, raw: str, field: str, operator: Any, api_as: Any
) -> None:
    before = _rows()
    response = getattr(api_as(operator), method)(path, raw, content_type="application/json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "parse_error"
    assert list(error["fields"]) == [field]
    assert _rows() == before


@pytest.mark.django_db
def test_a_body_over_the_upload_limit_is_a_413(operator: Any, api_as: Any, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = '{"name": "' + "x" * 1000 + '"}'
    response = api_as(operator).post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


@pytest.mark.django_db
def test_json_nested_beyond_the_recursion_limit_is_a_400(operator: Any, api_as: Any) -> None:
    body = '{"node_labels": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = api_as(operator).post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


READS = sorted(
    path
    for path, item in SCHEMA["paths"].items()
    if "get" in item and not re.search(r"{[^}]+}", path) and not path.startswith("/api/v1/schema")
)


@pytest.mark.django_db
@pytest.mark.parametrize("path", [*READS, "/dashboards/chargeback.csv", "/codespaces/status.json"])
def test_a_nul_in_the_query_string_is_a_400_naming_the_parameter(
    path: str, operator: Any, api_as: Any
) -> None:
    # PostgreSQL refuses NUL in a query parameter: ?search=a%00b was a 500 there
    client = api_as(operator)
    client.force_login(operator)
    response = client.get(f"{path}?search=a%00b&ids=1")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["fields"]) == (
        "invalid",
        {"search": ["The value contains a NUL character."]},
    )
