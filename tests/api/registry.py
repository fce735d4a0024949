"""How to make an object of a given tenant for every API resource (tests/api/test_tenant_isolation.py).

The isolation matrix enumerates every operation of the generated OpenAPI schema. Each operation's path
starts with /api/v1/<collection>/; this registry says, per collection, who owns its rows and how to create
one for a tenant, so the matrix can prove that another tenant never reads or writes it. A collection missing
here fails the matrix on purpose: register it (with a factory), or say why it is not tenant-owned.

Kinds:
- "tenant": rows belong to a tenant; other tenants get 404 on every detail operation and never see them
  in lists.
- "user": rows belong to a user (tokens); other users get 404 / never see them.
- "self": no rows, the endpoint describes the caller (me).
- "global": shared, non-tenant data every member may read (inventory); `reason` is required.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Model

from portal.models import ApiToken, Tenant
from portal.services import issue_token


@dataclass(frozen=True)
class Owner:
    """The tenant that owns the object, and a member of it who created it."""

    tenant: Tenant
    user: Any


@dataclass(frozen=True)
class Resource:
    kind: str  # "tenant" | "user" | "self" | "global"
    make: Callable[[Owner], Model] | None = None
    # Path parameters (beyond the first, which is `lookup(obj)`) for nested routes.
    path_params: Callable[[Model], dict[str, str]] | None = None
    lookup: Callable[[Model], str] = field(default=lambda obj: str(obj.pk))
    list_key: str = "id"
    # A body for POST on the collection that tries to create a row in `Owner.tenant`; None with a reason
    # when the collection cannot name another tenant (e.g. tokens are always the caller's own).
    create_payload: Callable[[Owner, Model], dict[str, Any]] | None = None
    create_reason: str = ""
    reason: str = ""
    # The model rows counted to prove that a refused write changed nothing.
    model: type[Model] | None = None


def _token(owner: Owner) -> Model:
    return issue_token(owner.user, name="isolation").token


def _tenant(owner: Owner) -> Model:
    return owner.tenant


REGISTRY: dict[str, Resource] = {
    "me": Resource(kind="self"),
    "tenants": Resource(
        kind="tenant",
        make=_tenant,
        model=Tenant,
        create_reason="read-only collection",
    ),
    "tokens": Resource(
        kind="user",
        make=_token,
        model=ApiToken,
        create_reason="a token is always created for the caller; there is no owner field to forge",
    ),
}


def register(collection: str, resource: Resource) -> None:
    """For apps that prefer to register their resources from their own test modules."""
    REGISTRY[collection] = resource
