"""What a caller names, resolved: the templates and quotas a team may use, a template or quota named
by instance, id or name, a preset of a template. Refusals are `InvalidInput` naming the field."""

from __future__ import annotations

import re
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from codespaces import pools
from codespaces.choices import (
    CodespaceState,
)
from codespaces.models import (
    CodespaceTemplate,
)
from portal.compiled_query import CompiledQuerySet
from portal.errors import InvalidInput
from portal.models import Tenant
from portal.numbers import parse_int
from portal.scoping import is_operator, tenant_ids_for
from quotas.models import Quota

SLUG_PATTERN = re.compile(r"[-a-zA-Z0-9_]{1,63}")
S = CodespaceState


# --- Templates and quotas a user may use --------------------------------------------------------


def templates_for_tenant(tenant: Tenant | None) -> QuerySet[CodespaceTemplate]:
    """Active templates open to every tenant or to `tenant`."""
    queryset = CodespaceTemplate.objects.filter(active=True)
    if tenant is None:
        return queryset.filter(allowed_tenants__isnull=True).distinct()
    return (
        queryset.filter(allowed_tenants__isnull=True) | queryset.filter(allowed_tenants=tenant)
    ).distinct()


def templates_for_user(user: Any) -> QuerySet[CodespaceTemplate]:
    """Templates a user may see: all for operators; otherwise active ones open to one of their teams."""
    if is_operator(user):
        return CodespaceTemplate.objects.all()
    queryset = CodespaceTemplate.objects.filter(active=True)
    return (
        queryset.filter(allowed_tenants__isnull=True)
        | queryset.filter(allowed_tenants__in=tenant_ids_for(user))
    ).distinct()


def templates_overview() -> QuerySet[CodespaceTemplate]:
    """Every template (operators' page): presets, allowed teams, and `live` codespaces made from it."""
    return CodespaceTemplate.objects.prefetch_related("presets", "allowed_tenants").annotate(
        live=Count("codespaces", filter=~Q(codespaces__state__in=[S.DELETING, S.DELETED]))
    )


def quotas_for_tenant(tenant: Tenant) -> CompiledQuerySet:
    """The team's quotas with their pools, by pool name (compiled once: every create reads them)."""
    return _QUOTAS.filter(tenant_id=tenant.pk)


def shown(value: Any) -> str:
    """User input safe to echo in an error (names only; anything else is not repeated back)."""
    text = str(value)
    return text if SLUG_PATTERN.fullmatch(text) else "(not a valid name)"


def name_lookup(value: Any) -> dict[str, Any]:
    """A pk or name lookup for user input; anything that cannot be either matches nothing."""
    text = str(value)
    pk = parse_int(text, minimum=1)
    if pk is not None:
        return {"pk": pk}
    if SLUG_PATTERN.fullmatch(text):
        return {"name": text}
    return {"pk__in": []}


def default_quota(template: CodespaceTemplate | None, quotas: list[Quota]) -> Quota | None:
    """The quota the create page starts with: the first whose pool has the GPU model of the
    template's first GPU preset (so its headline size can start), else the first one."""
    if not quotas:
        return None
    wanted = [p.gpu_model for p in template.presets.all() if p.gpu_model] if template else []
    for model in wanted[:1]:
        for quota in quotas:
            if any(m.model == model for m in pools.gpu_models_of_group(quota.group)):
                return quota
    return quotas[0]


# The submit path's reads, compiled once per shape (portal.compiled_query).
_ALLOW_LIST = CodespaceTemplate.allowed_tenants.through.objects
_TEMPLATES = CompiledQuerySet(
    "codespaces.templates",
    CodespaceTemplate.objects.annotate(
        restricted=Exists(_ALLOW_LIST.filter(codespacetemplate_id=OuterRef("pk")))
    ),
)
_ALLOWED = CompiledQuerySet("codespaces.template-allowed", _ALLOW_LIST.values("tenant_id"))
_QUOTAS = CompiledQuerySet(
    "codespaces.quotas", Quota.objects.select_related("group").order_by("group__name", "pk")
)


def templates_named(template: CodespaceTemplate | int | str) -> CompiledQuerySet:
    """The (at most one) template a caller names, by instance, id or name, with its allow-list flag."""
    lookup = (
        {"pk": template.pk} if isinstance(template, CodespaceTemplate) else name_lookup(template)
    )
    return _TEMPLATES.filter(**lookup).head()


def resolve_template(
    template: CodespaceTemplate | int | str | None,
    tenant: Tenant,
    named: CompiledQuerySet | None = None,
) -> CodespaceTemplate:
    """The active template a caller names, if `tenant` may use it (`named`: its query, if the caller
    already evaluated it together with others); InvalidInput naming the field otherwise."""
    if template is None or template == "":
        raise InvalidInput(
            "template: choose a template.", fields={"template": ["Choose a template."]}
        )
    # The template and whether it has an allow-list, then (only if it has) whether the team is on it.
    found = next(iter(named if named is not None else templates_named(template)), None)
    if found is None or not found.active:
        raise InvalidInput(
            f"template: there is no template {shown(template)}.",
            fields={"template": [f"Unknown template {shown(template)}."]},
        )
    if found.restricted and not list(
        _ALLOWED.filter(codespacetemplate_id=found.pk, tenant_id=tenant.pk)[:1]
    ):
        raise InvalidInput(
            f"template: '{found.name}' is not available to team {tenant.slug}.",
            fields={
                "template": [f"Template '{found.name}' is not available to team {tenant.slug}."]
            },
        )
    return found


def resolve_quota(
    quota: Quota | int | None,
    tenant: Tenant,
    gpu_model: str,
    quotas_of_team: CompiledQuerySet | None = None,
) -> Quota:
    """The quota a caller names, or the team's first one able to run `gpu_model` (`quotas_of_team`:
    `quotas_for_tenant(tenant)`, if the caller already evaluated it together with others)."""
    quotas = list(quotas_of_team if quotas_of_team is not None else quotas_for_tenant(tenant))
    if not quotas:
        raise InvalidInput(
            f"quota: team {tenant.slug} has no quota to run codespaces; ask a platform operator.",
            fields={"quota": [f"Team {tenant.slug} has no quota."]},
        )
    if quota is not None and quota != "":
        wanted = quota.pk if isinstance(quota, Quota) else int(quota)
        for candidate in quotas:
            if candidate.pk == wanted:
                return candidate
        raise InvalidInput(
            f"quota: quota {quota!s} does not belong to team {tenant.slug}.",
            fields={"quota": [f"Quota {quota!s} is not one of team {tenant.slug}'s quotas."]},
        )
    if gpu_model:
        for candidate in quotas:
            if any(m.model == gpu_model for m in pools.gpu_models_of_group(candidate.group)):
                return candidate
    return quotas[0]
