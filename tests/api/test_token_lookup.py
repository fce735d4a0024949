"""Token authentication reads the token and its user with one precompiled query on PostgreSQL (the
ORM elsewhere); both give the same objects, and a revoked token still fails at once."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework import exceptions

from portal.authentication import _token_sql, _token_with_user, authenticate_token
from portal.models import ApiToken, Membership
from portal.scoping import tenant_ids_for
from portal.services import issue_token
from portal.tests.factories import MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_lookup_matches_the_orm_and_revocation_applies_immediately(bob: Any) -> None:
    issued = issue_token(bob, name="ci")
    prefix = issued.token.prefix
    if connection.vendor == "postgresql":
        assert _token_sql(connection.alias, connection.vendor) is not None
    found = _token_with_user(prefix)
    assert found is not None
    orm = ApiToken.objects.select_related("user").get(prefix=prefix)
    assert [getattr(found, f.attname) for f in ApiToken._meta.concrete_fields] == [
        getattr(orm, f.attname) for f in ApiToken._meta.concrete_fields
    ]
    assert (found.user.pk, found.user.username, found.user.is_active) == (bob.pk, "bob", True)
    # the same query read bob's tenant ids, where tenant scoping and rate limiting look for them
    members = set(Membership.objects.filter(user=bob).values_list("tenant_id", flat=True))
    assert members
    assert found.user._tessera_tenant_ids == members
    assert tenant_ids_for(found.user) == members
    assert _token_with_user("00000000") is None
    assert authenticate_token(issued.raw).user == bob
    ApiToken.objects.filter(pk=orm.pk).update(revoked_at=timezone.now())
    with pytest.raises(exceptions.AuthenticationFailed):
        authenticate_token(issued.raw)


def test_lookup_reads_several_tenants_and_none(bob: Any) -> None:
    """A user in two teams gets both ids; a user in none gets an empty set (not a query later)."""
    other = TenantFactory(slug="second")
    MembershipFactory(user=bob, tenant=other)
    found = _token_with_user(issue_token(bob, name="two").token.prefix)
    assert found is not None
    assert found.user._tessera_tenant_ids == set(
        Membership.objects.filter(user=bob).values_list("tenant_id", flat=True)
    )
    assert other.pk in found.user._tessera_tenant_ids
    loner = UserFactory(username="loner")
    found = _token_with_user(issue_token(loner, name="none").token.prefix)
    assert found is not None
    assert found.user._tessera_tenant_ids == set()


def test_teams_named_by_slug_resolve_without_a_query(
    bob: Any, django_assert_num_queries: Any
) -> None:
    """On PostgreSQL the token lookup also reads the teams' slugs: naming one of your teams costs no
    query, naming another team is refused as before, and the team's other fields load when used."""
    from portal.errors import InvalidInput
    from portal.scoping import tenant_for_request

    second = TenantFactory(slug="second", name="Second team")
    MembershipFactory(user=bob, tenant=second)
    TenantFactory(slug="not-mine")
    found = _token_with_user(issue_token(bob, name="slugs").token.prefix)
    assert found is not None
    user = found.user
    if connection.vendor != "postgresql":
        assert tenant_for_request(user, "second", thing="job").pk == second.pk
        return
    assert user._tessera_tenant_slugs == {
        "team-a": bob.memberships.get(tenant__slug="team-a").tenant_id,
        "second": second.pk,
    }
    with django_assert_num_queries(0):
        tenant = tenant_for_request(user, "second", thing="job")
    assert (tenant.pk, tenant.slug) == (second.pk, "second")
    assert tenant.name == "Second team"  # loaded on use
    with django_assert_num_queries(0), pytest.raises(InvalidInput) as refused:
        tenant_for_request(user, "not-mine", thing="job")
    assert refused.value.fields == {"tenant": ["Unknown team not-mine."]}
