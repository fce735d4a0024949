"""Every operation of the API schema × {own tenant, other tenant, anonymous, revoked, expired} (issue 7).

Built from the generated OpenAPI schema, so a new endpoint is covered the moment it is routed. For each
operation an object of team-a is created through tests/api/registry.py, then:
- anonymous, a revoked token and an expired token get 401 with the error body and nothing changes;
- a member of team-b (charlie) gets 404 on every operation on team-a's object (reads and writes, the row
  unchanged), never sees team-a's rows in a list (also when filtering by ?tenant=team-a), and cannot create
  a row in team-a;
- a member of team-a (bob) can see the object (200 on reads, never 401/404 on writes), which proves the
  checks above are not vacuous.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.forms.models import model_to_dict
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from portal.choices import MembershipRole
from portal.services import issue_token, revoke_token
from portal.tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.api.registry import REGISTRY, Owner, Resource

METHODS = ("get", "post", "put", "patch", "delete")
PREFIX = "/api/v1/"


SCHEMA: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
OPERATIONS = sorted(
    (path, method) for path, item in SCHEMA["paths"].items() for method in item if method in METHODS
)
IDENTITIES = ("own", "other", "anonymous", "revoked", "expired")


def collection_of(path: str) -> str:
    """`codespaces` for /api/v1/codespaces/{id}/start/; `usage/tenants` when the registry names a nested
    collection (the longest registered prefix wins)."""
    assert path.startswith(PREFIX), path
    segments = path[len(PREFIX) :].split("/")
    if len(segments) > 1 and f"{segments[0]}/{segments[1]}" in REGISTRY:
        return f"{segments[0]}/{segments[1]}"
    return segments[0]


def path_params(path: str) -> list[str]:
    return re.findall(r"{([^}]+)}", path)


def resource_for(path: str) -> Resource:
    collection = collection_of(path)
    resource = REGISTRY.get(collection)
    if resource is None:
        pytest.fail(
            f"{path}: collection {collection!r} is not in tests/api/registry.py. Register how to make a "
            "tenant's object for it (or why it is not tenant-owned), so the isolation matrix covers it."
        )
    return resource


def fill_path(path: str, resource: Resource, obj: Any) -> str:
    params = path_params(path)
    if not params:
        return path
    if obj is None:
        pytest.fail(f"{path}: registry entry for {collection_of(path)!r} has no `make`")
    values = {params[0]: resource.lookup(obj)}
    if len(params) > 1:
        if resource.path_params is None:
            pytest.fail(
                f"{path}: nested path parameters {params[1:]}; add `path_params` to the registry"
            )
        values.update(resource.path_params(obj))
    for name in params:
        path = path.replace("{" + name + "}", values[name])
    return path


def missing_object_url(path: str) -> str:
    return re.sub(r"{[^}]+}", "987654321", path)


def call(client: APIClient, method: str, url: str, data: Any = None) -> Any:
    kwargs: dict[str, Any] = (
        {"HTTP_IF_MATCH": '"1"'} if method in ("put", "patch", "delete") else {}
    )
    if method in ("post", "put", "patch"):
        return getattr(client, method)(
            url, data=json.dumps(data or {}), content_type="application/json", **kwargs
        )
    return getattr(client, method)(url, **kwargs)


def results_of(body: Any) -> list[Any]:
    if isinstance(body, dict) and isinstance(body.get("results"), list):
        return body["results"]
    if isinstance(body, list):
        return body
    return []


def snapshot(obj: Any) -> Any:
    if obj is None:
        return None
    fresh = type(obj)._default_manager.filter(pk=obj.pk).first()
    return None if fresh is None else model_to_dict(fresh)


@pytest.fixture
def world(db: Any) -> dict[str, Any]:
    team_a = TenantFactory(slug="team-a", name="Team A")
    team_b = TenantFactory(slug="team-b", name="Team B")
    bob = UserFactory(username="bob")
    MembershipFactory(user=bob, tenant=team_a, role=MembershipRole.TENANT_ADMIN)
    charlie = UserFactory(username="charlie")
    MembershipFactory(user=charlie, tenant=team_b, role=MembershipRole.TENANT_ADMIN)
    clients: dict[str, APIClient] = {"anonymous": APIClient()}
    for identity, user in (("own", bob), ("other", charlie)):
        clients[identity] = APIClient()
        clients[identity].credentials(
            HTTP_AUTHORIZATION=f"Bearer {issue_token(user, name=identity).raw}"
        )
    revoked = issue_token(bob, name="revoked")
    revoke_token(bob, revoked.token.pk)
    expired = issue_token(bob, name="expired")
    type(expired.token).objects.filter(pk=expired.token.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    for identity, issued in (("revoked", revoked), ("expired", expired)):
        clients[identity] = APIClient()
        clients[identity].credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    return {"team_a": team_a, "team_b": team_b, "bob": bob, "charlie": charlie, "clients": clients}


def test_the_schema_has_operations_and_every_collection_is_registered() -> None:
    assert len(OPERATIONS) >= 6
    missing = sorted({collection_of(path) for path, _ in OPERATIONS} - set(REGISTRY))
    assert missing == [], f"register these collections in tests/api/registry.py: {missing}"


@pytest.mark.parametrize("identity", IDENTITIES)
@pytest.mark.parametrize(("path", "method"), OPERATIONS)
def test_operation_is_tenant_isolated(
    world: dict[str, Any], path: str, method: str, identity: str
) -> None:
    resource = resource_for(path)
    owner = Owner(tenant=world["team_a"], user=world["bob"])
    obj = resource.make(owner) if resource.make is not None else None
    before = snapshot(obj)
    model = resource.model_class()
    count_before = model._default_manager.count() if model is not None else None
    client = world["clients"][identity]
    url = fill_path(path, resource, obj)
    is_detail = bool(path_params(path))

    response = call(client, method, url)

    assert response.status_code < 500, (path, method, identity, response.content[:500])
    if identity in ("anonymous", "revoked", "expired"):
        assert response.status_code == 401, (path, method, identity, response.status_code)
        assert set(response.json()["error"]) == {"code", "message", "fields"}
        assert snapshot(obj) == before
        if model is not None:
            assert model._default_manager.count() == count_before
        return

    if identity == "own":
        # The owner's side proves the other checks are not vacuous: the object is visible to its team.
        if resource.kind == "global":
            return
        assert response.status_code != 401, (path, method, response.content[:500])
        if is_detail:
            assert response.status_code != 404, (path, method, response.content[:500])
        if method == "get" and is_detail:
            assert response.status_code in (200, 403), (path, response.content[:500])
        is_collection = path == f"{PREFIX}{collection_of(path)}/"
        if method == "get" and is_collection and obj is not None:
            assert response.status_code == 200, (path, response.content[:500])
            keys = {item.get(resource.list_key) for item in results_of(response.json())}
            assert obj.pk in keys or resource.lookup(obj) in keys, (
                f"{path}: the owner's own object is missing from the list, so the no-leak check "
                "on this list would prove nothing; fix the registry factory"
            )
        return

    # identity == "other": charlie of team-b
    if resource.kind == "global":
        assert resource.reason, f"{path}: global resources need a written reason"
        if method == "get":
            assert response.status_code in (200, 403), (path, response.status_code)
            assert_no_leak(response, resource, None, world)
        else:
            assert snapshot(obj) == before, f"{path} {method}: another tenant changed shared data"
        return
    if is_detail and resource.kind in ("tenant", "user"):
        if response.status_code == 403:
            # Allowed only when it is no existence oracle: the same answer for an id that does not exist.
            missing = call(client, method, missing_object_url(path))
            assert (missing.status_code, missing.json()) == (403, response.json()), (
                f"{path} {method}: 403 for another tenant's object but {missing.status_code} for a "
                "missing one reveals that the object exists"
            )
        else:
            assert response.status_code == 404, (
                path,
                method,
                response.status_code,
                response.content[:500],
            )
            assert response.json()["error"]["code"] == "not_found"
        assert snapshot(obj) == before, f"{path} {method}: another tenant changed the object"
        if model is not None:
            assert model._default_manager.count() == count_before
        return
    if method == "get":
        # 404 here: an operator-only view that hides itself from members.
        assert response.status_code in (200, 403, 404), (path, response.status_code)
        assert_no_leak(response, resource, obj, world)
        if any(p["name"] == "tenant" for p in _query_params(path, method)):
            for value in (world["team_a"].slug, str(world["team_a"].pk)):
                filtered = client.get(url, {"tenant": value})
                assert filtered.status_code in (200, 400, 403, 404), (path, filtered.status_code)
                assert_no_leak(filtered, resource, obj, world)
        return
    if method == "post" and not is_detail:
        if resource.create_payload is None:
            assert resource.create_reason, (
                f"{path}: POST creates rows; give the registry a create_payload that names another "
                "tenant (or a create_reason why the body cannot name one)"
            )
            return
        assert obj is not None
        payload = resource.create_payload(owner, obj)
        model = resource.model_class()
        assert model is not None
        count_before = model._default_manager.count()
        forged = call(client, "post", url, payload)
        assert forged.status_code in (400, 403, 404), (path, forged.status_code, forged.content)
        assert model._default_manager.count() == count_before
        return
    assert snapshot(obj) == before


def _query_params(path: str, method: str) -> list[dict[str, Any]]:
    return [
        p for p in SCHEMA["paths"][path][method].get("parameters", []) if p.get("in") == "query"
    ]


def assert_no_leak(response: Any, resource: Resource, obj: Any, world: dict[str, Any]) -> None:
    if response.status_code != 200:
        return
    text = response.content.decode()
    for secret in (world["team_a"].slug, "team-a-secret"):
        assert secret not in text, f"{secret!r} appears in team-b's response: {text[:500]}"
    if obj is not None and resource.kind in ("tenant", "user"):
        keys = {item.get(resource.list_key) for item in results_of(response.json())}
        assert obj.pk not in keys, text[:500]
        assert resource.lookup(obj) not in keys, text[:500]
