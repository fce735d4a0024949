"""A cursor a client made up is a 400 naming `cursor` on every cursor-paginated list (issue 38).

Built from the generated OpenAPI schema: every GET operation that takes a `cursor` parameter (the lists,
and a detail's log such as a quota's history), so a new paginated endpoint is covered the moment it is
routed. Each is asked, as an operator and with a row in it, for pages from cursors that are not base64,
are base64 of something that is not a cursor, point past any row, or carry a negative or out-of-range
number; the shared pagination class (portal.api.pagination) refuses each with the project's error body.
A position that is not a number or a time is a real position on a list ordered by a name (the page after
"abc"), so those two cases expect a page there, and a 400 everywhere else.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from django.db.models import CharField, TextField
from django.urls import resolve
from drf_spectacular.generators import SchemaGenerator

from portal.models import Membership
from tests.api.registry import REGISTRY, Owner

SCHEMA: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
PAGINATED = sorted(
    path
    for path, item in SCHEMA["paths"].items()
    if any(parameter["name"] == "cursor" for parameter in item.get("get", {}).get("parameters", []))
)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("ascii")).decode("ascii")


TAMPERED = [
    ("not base64", "%%%not-base64"),
    ("base64 of non-ascii", base64.b64encode("p=\u00e9".encode()).decode("ascii")),
    ("position with a NUL", _b64("p=a%00b")),
    ("negative offset", _b64("o=-5")),
    ("offset that is not a number", _b64("o=abc")),
    ("huge offset", _b64("o=99999999999999999999999")),
    ("reverse that is not a number", _b64("r=yes")),
]
# not a value of a numeric or time ordering field; a name could be either
UNTYPED_POSITIONS = [
    ("garbage position", _b64("p=abc")),
    ("position beyond 64 bits", _b64("p=99999999999999999999999")),
]


def _collection(path: str) -> str:
    return path.removeprefix("/api/v1/").split("/")[0]


def test_the_schema_has_the_paginated_lists() -> None:
    assert "/api/v1/workloads/" in PAGINATED
    assert "/api/v1/quotas/{id}/history/" in PAGINATED
    assert len(PAGINATED) >= 10


def _orders_by_text(path: str) -> bool:
    """Whether the list's default order is by a text field (a detail's log is newest first, by id)."""
    view = resolve(path).func.cls  # type: ignore[attr-defined]
    ordering = "-id" if re.search(r"{[^}]+}", path) else (getattr(view, "ordering", None) or "-id")
    term = ordering if isinstance(ordering, str) else ordering[0]
    if term.lstrip("-") == "id":
        return False
    field = view.queryset.model._meta.get_field(term.lstrip("-"))
    return isinstance(field, CharField | TextField)


def _get_with_a_row(path: str, cursor: str, bob: Any, operator: Any, api_as: Any) -> Any:
    resource = REGISTRY[_collection(path)]
    obj = None
    if resource.make is not None:
        obj = resource.make(Owner(tenant=Membership.objects.get(user=bob).tenant, user=bob))
    params = re.findall(r"{([^}]+)}", path)
    if params:
        assert obj is not None, path
        path = path.replace(f"{{{params[0]}}}", resource.lookup(obj))
    return api_as(operator).get(path, {"cursor": cursor})


def _assert_names_cursor(response: Any) -> None:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert list(error["fields"]) == ["cursor"]
    assert error["message"].startswith("cursor: ")


@pytest.mark.django_db
@pytest.mark.parametrize("path", PAGINATED)
@pytest.mark.parametrize(("_case", "cursor"), TAMPERED)
def test_a_tampered_cursor_is_a_400_naming_cursor(
    path: str, _case: str, cursor: str, bob: Any, operator: Any, api_as: Any
) -> None:
    _assert_names_cursor(_get_with_a_row(path, cursor, bob, operator, api_as))


@pytest.mark.django_db
@pytest.mark.parametrize("path", PAGINATED)
@pytest.mark.parametrize(("_case", "cursor"), UNTYPED_POSITIONS)
def test_a_position_the_ordering_field_cannot_hold_is_a_400_naming_cursor(
    path: str, _case: str, cursor: str, bob: Any, operator: Any, api_as: Any
) -> None:
    response = _get_with_a_row(path, cursor, bob, operator, api_as)
    if _orders_by_text(path):
        assert response.status_code == 200, response.content
        assert "results" in response.json()
    else:
        _assert_names_cursor(response)


@pytest.mark.django_db
def test_a_cursor_the_api_handed_out_still_pages(operator: Any, api_as: Any) -> None:
    from portal.tests.factories import TenantFactory

    for index in range(3):
        TenantFactory(slug=f"page-{index}")
    client = api_as(operator)
    first = client.get("/api/v1/tenants/", {"limit": 2}).json()
    second = client.get(first["next"]).json()
    assert second["results"]
    assert {row["id"] for row in first["results"]}.isdisjoint(
        row["id"] for row in second["results"]
    )
