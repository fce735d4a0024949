"""Tenant scoping: the ONE place that decides which tenant-owned rows a user may see.

Every view, form and API endpoint limits its querysets with `scope_queryset` (or the mixins below). Rows of
other tenants are simply absent, so they answer 404 (never 403 with details). Platform operators
(`is_staff`) see every tenant.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Model, QuerySet
from django.http import Http404

from portal.choices import MembershipRole
from portal.compiled_query import CompiledQuerySet
from portal.errors import InvalidInput
from portal.models import Membership, Tenant

M = TypeVar("M", bound=Model)
UserLike = AbstractBaseUser | AnonymousUser


def current_user(request: Any) -> User:
    """The authenticated user of a request (views behind login_required / IsAuthenticated)."""
    user = request.user
    if not user.is_authenticated:
        raise PermissionDenied("Log in first.")
    return cast(User, user)


def signed_in_or_none(actor: Any) -> Any:
    """`actor` when it is a signed-in user, else None (the system, or an anonymous caller): what an
    audit or history row records as its actor."""
    return actor if getattr(actor, "is_authenticated", False) else None


def is_operator(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and getattr(user, "is_staff", False))


def tenant_ids_for(user: Any) -> set[int]:
    """Ids of the tenants the user belongs to (cached on the user object for the request)."""
    if not getattr(user, "is_authenticated", False):
        return set()
    cached = getattr(user, "_tessera_tenant_ids", None)
    if cached is None:
        cached = set(
            Membership.objects.filter(user=user).order_by().values_list("tenant_id", flat=True)
        )
        user._tessera_tenant_ids = cached
    return set(cached)


def admin_tenant_ids_for(user: Any) -> set[int]:
    if not getattr(user, "is_authenticated", False):
        return set()
    return set(
        Membership.objects.filter(user=user, role=MembershipRole.TENANT_ADMIN)
        .order_by()
        .values_list("tenant_id", flat=True)
    )


def tenants_for(user: Any) -> QuerySet[Tenant]:
    """The tenants a user may act in: all for operators, their memberships otherwise."""
    if is_operator(user):
        return Tenant.objects.all()
    return Tenant.objects.filter(pk__in=tenant_ids_for(user))


_TENANTS = CompiledQuerySet("portal.scoping.tenants", Tenant.objects.all())


def tenant_for_request(user: Any, slug: str | None, *, thing: str) -> Tenant:
    """The team a request acts in: the one named by `slug` (it must be one of the user's), or the user's
    only team when no slug is given. Raises InvalidInput naming the `tenant` field otherwise."""
    operator = is_operator(user)
    known: dict[str, int] | None = (
        None if operator else getattr(user, "_tessera_tenant_slugs", None)
    )
    if known is not None:
        # The token lookup read the user's teams with their slugs: no query (other fields of a team
        # load when first used).
        pairs = ([(slug, known[slug])] if slug in known else []) if slug else list(known.items())
        mine = [Tenant.from_db(DEFAULT_DB_ALIAS, ["id", "slug"], [i, s]) for s, i in pairs]
    else:
        # Compiled once (portal.compiled_query): this runs on every API create.
        tenants = _TENANTS if operator else _TENANTS.filter(pk__in=sorted(tenant_ids_for(user)))
        found = tenants.filter(slug=slug).first() if slug else None
        mine = ([found] if found is not None else []) if slug else list(tenants[:2])
    if slug:
        if not mine:
            raise InvalidInput(
                f"tenant: you are not a member of team {slug}.",
                fields={"tenant": [f"Unknown team {slug}."]},
            )
        return mine[0]
    if len(mine) != 1:
        raise _which_tenant(user, thing)
    return mine[0]


_LISTED_TENANTS = 20


def _which_tenant(user: Any, thing: str) -> InvalidInput:
    """The refusal of a request that names no team when the user has several (or none): it lists the
    teams to choose from by slug (the first `_LISTED_TENANTS`), so the next request can name one."""
    tenants = tenants_for(user).order_by("slug")
    slugs = list(tenants.values_list("slug", flat=True)[: _LISTED_TENANTS + 1])
    if not slugs:
        return InvalidInput(
            f"tenant: you are not a member of any team, so no {thing} can be created.",
            fields={"tenant": ["You belong to no team; ask a team admin to add you."]},
        )
    listed = ", ".join(slugs[:_LISTED_TENANTS]) + (", ..." if len(slugs) > _LISTED_TENANTS else "")
    return InvalidInput(
        f"tenant: name the team (slug) the {thing} belongs to: one of {listed}.",
        fields={"tenant": [f"Required: you may act in several teams: {listed}."]},
    )


def scope_queryset(queryset: QuerySet[M], user: Any, tenant_field: str = "tenant") -> QuerySet[M]:
    """Limit `queryset` to rows whose `tenant_field` is one of the user's tenants.

    `tenant_field` is a lookup path to the Tenant foreign key (e.g. "tenant", "quota__tenant").
    Operators get the queryset unchanged; anonymous users get nothing.
    """
    if is_operator(user):
        return queryset
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    return queryset.filter(**{f"{tenant_field}_id__in": tenant_ids_for(user)})


def get_scoped_or_404(
    queryset: QuerySet[M], user: Any, tenant_field: str = "tenant", **lookup: Any
) -> M:
    """Fetch one row the user may see, or raise Http404 (also for rows of other tenants)."""
    try:
        return scope_queryset(queryset, user, tenant_field).get(**lookup)
    except ObjectDoesNotExist as exc:
        raise Http404("Not found.") from exc


def can_admin_tenant(user: Any, tenant: Tenant | int) -> bool:
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    return is_operator(user) or tenant_id in admin_tenant_ids_for(user)


def require_member(user: Any, tenant: Tenant | int) -> None:
    """Raise Http404 unless the user may act in `tenant` (hides the tenant's existence)."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    if not (is_operator(user) or tenant_id in tenant_ids_for(user)):
        raise Http404("Not found.")


def require_operator(user: Any) -> None:
    """Raise Http404 unless the user is a platform operator (operators' pages do not announce
    themselves to anyone else)."""
    if not is_operator(user):
        raise Http404("Not found.")


class TenantScopedQuerysetMixin:
    """For Django class-based views and DRF viewsets: `get_queryset` goes through `scope_queryset`.

    Set `tenant_field` when the tenant is reached through a relation.
    """

    tenant_field = "tenant"
    request: Any

    def get_queryset(self) -> QuerySet[Any]:
        queryset = super().get_queryset()  # type: ignore[misc]
        return scope_queryset(queryset, self.request.user, self.tenant_field)
