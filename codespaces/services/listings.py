"""Which codespaces a user sees: the list pages' scopes and the base of every lookup."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from codespaces.choices import (
    CodespaceState,
)
from codespaces.models import (
    Codespace,
)
from portal.scoping import admin_tenant_ids_for, is_operator, scope_queryset

S = CodespaceState


def visible_codespaces(user: Any, *, scope: str = "mine") -> QuerySet[Codespace]:
    """Codespaces for a listing: "mine" (the user's own), "team" (teams the user administers; all for
    operators), "all" (operators only; others get their teams' rows)."""
    queryset = Codespace.objects.exclude(state=S.DELETED).select_related(
        "owner", "tenant", "template", "quota__group", "workload"
    )
    if scope == "mine":
        return queryset.filter(owner=user)
    if scope == "team":
        if is_operator(user):
            return queryset
        return queryset.filter(tenant_id__in=admin_tenant_ids_for(user))
    return scope_queryset(queryset, user)


def scoped_codespaces(user: Any, base: Any = None) -> Any:
    """Live codespaces of the user's tenants (all for operators): the base of every lookup. `base` is
    what to narrow (default: codespaces with their relations; the API list passes its compiled rows)."""
    if base is None:
        base = Codespace.objects.select_related(
            "owner", "tenant", "template", "quota__group", "workload", "preset"
        )
    return scope_queryset(base.exclude(state=S.DELETED), user)
