"""`CompiledQuerySet`: the same rows as the ORM in every shape, SQL compiled once per shape, each
request's own values bound (never another request's), and a plain ORM fallback where it can't be sure."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, F, OuterRef, Q, Subquery
from django.test.utils import CaptureQueriesContext

from portal import compiled_query
from portal.compiled_query import CompiledQuerySet
from portal.models import Membership, Tenant
from portal.tests.factories import MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    compiled_query.clear_cache()
    yield
    compiled_query.clear_cache()


def _template() -> Any:
    members = Membership.objects.filter(tenant=OuterRef("pk")).order_by().values("tenant")
    count = members.annotate(n=Count("pk")).values("n")[:1]
    return Tenant.objects.annotate(members=Subquery(count)).values("id", "slug", "name", "members")


def _teams() -> list[Tenant]:
    teams = [TenantFactory(slug=f"team-{i}", name=f"Team {i}") for i in range(6)]
    for index, team in enumerate(teams):
        for _ in range(index % 3):
            MembershipFactory(tenant=team, user=UserFactory())
    return teams


SHAPES: dict[str, Callable[[Any, list[Tenant]], Any]] = {
    "everything": lambda qs, t: qs.order_by("id"),
    "in ids": lambda qs, t: qs.filter(id__in=[t[0].pk, t[2].pk]).order_by("-id"),
    "in a set": lambda qs, t: qs.filter(id__in={t[1].pk, t[3].pk, t[5].pk}).order_by("id"),
    "exclude a slug": lambda qs, t: qs.exclude(slug="team-1").order_by("slug"),
    "digits as a cursor": lambda qs, t: qs.filter(id__lt=str(t[3].pk)).order_by("-id"),
    "Q or": lambda qs, t: qs.filter(Q(slug="team-4") | Q(id=t[0].pk)).order_by("id"),
    "negated Q": lambda qs, t: qs.filter(~Q(slug__in=["team-0", "team-5"])).order_by("id"),
    "None is IS NULL": lambda qs, t: qs.filter(members=None).order_by("id"),
    "a slice": lambda qs, t: qs.order_by("id")[1:4],
    "nothing": lambda qs, t: qs.none(),
    "icontains (not compiled)": lambda qs, t: qs.filter(name__icontains="m 3").order_by("id"),
    "two lookups in one call": lambda qs, t: qs.filter(id__gte=t[2].pk, slug__gte="team").order_by(
        "id"
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_rows_equal_the_orm_in_every_shape(shape: str) -> None:
    teams = _teams()
    build = SHAPES[shape]
    expected = list(build(_template(), teams))
    first = list(build(CompiledQuerySet("test.tenants", _template()), teams))
    again = list(build(CompiledQuerySet("test.tenants", _template()), teams))
    assert first == expected
    assert again == expected
    if shape != "nothing":
        assert expected, "the shape must select something to prove anything"


def test_a_shape_compiles_once_and_binds_each_requests_own_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    teams = _teams()
    compiles = []
    original = CompiledQuerySet._compile

    def counting(self: CompiledQuerySet) -> Any:
        compiles.append(self._ops)
        return original(self)

    monkeypatch.setattr(CompiledQuerySet, "_compile", counting)
    base = CompiledQuerySet("test.tenants", _template())
    for team in teams:
        rows = list(base.filter(id__in=[team.pk]).exclude(slug="nobody").order_by("id"))
        assert [row["slug"] for row in rows] == [team.slug]
    assert len(compiles) == 1
    # another number of ids is another shape (another IN list)
    rows = list(base.filter(id__in=[teams[0].pk, teams[1].pk]).exclude(slug="nobody"))
    assert {row["slug"] for row in rows} == {"team-0", "team-1"}
    assert len(compiles) == 2


def test_a_compiled_shape_runs_one_query_without_recompiling() -> None:
    teams = _teams()
    base = CompiledQuerySet("test.tenants", _template())
    list(base.filter(id__in=[teams[0].pk]).order_by("id"))
    with CaptureQueriesContext(connection) as queries:
        rows = list(base.filter(id__in=[teams[4].pk]).order_by("id"))
    assert len(queries) == 1
    assert rows == [{"id": teams[4].pk, "slug": "team-4", "name": "Team 4", "members": 1}]


def test_numeric_subquery_columns_come_back_as_django_converts_them() -> None:
    teams = _teams()
    rows = list(CompiledQuerySet("test.tenants", _template()).order_by("id"))
    assert [row["members"] for row in rows] == [None if i % 3 == 0 else i % 3 for i in range(6)]
    assert rows[0]["id"] == teams[0].pk


def test_a_transformed_sentinel_is_never_bound_as_a_value() -> None:
    _teams()
    queryset = CompiledQuerySet("test.tenants", _template()).filter(slug__contains="am-2")
    assert queryset._compile() is compiled_query._UNCOMPILABLE
    assert [row["slug"] for row in queryset] == ["team-2"]


def test_templates_are_values_or_model_querysets_and_filters_take_q_or_lookups() -> None:
    with pytest.raises(TypeError):
        CompiledQuerySet("test.bad", Tenant.objects.values_list("slug"))
    with pytest.raises(TypeError):
        CompiledQuerySet("test.bad", Tenant.objects.prefetch_related("memberships"))
    with pytest.raises(TypeError):
        CompiledQuerySet("test.tenants", _template()).filter("slug")


def test_int4_and_small_positive_columns_bind_values_not_emptiness() -> None:
    """Django empties or drops a lookup whose value a column can't hold: sentinels must fit every
    integer column, or a compiled shape would answer 'nothing' (or 'everything') for every request."""
    users = [UserFactory() for _ in range(3)]
    base = CompiledQuerySet("test.users", get_user_model().objects.values("pk", "username"))
    for user in users:
        rows = list(base.filter(pk=user.pk).select_for_update())
        assert rows == [{"pk": user.pk, "username": user.username}]


def test_a_template_constant_that_looks_like_a_sentinel_is_not_taken_for_a_value() -> None:
    teams = _teams()
    template = _template().filter(id__lt=compiled_query._SENTINEL_BASES[0])
    queryset = CompiledQuerySet("test.collide", template).filter(id__in=[teams[1].pk])
    assert queryset._compile() is compiled_query._UNCOMPILABLE
    assert [row["slug"] for row in queryset] == ["team-1"]


def test_model_templates_give_instances_with_related_objects_and_annotations() -> None:
    teams = _teams()
    members = Membership.objects.select_related("tenant", "user").annotate(slug=F("tenant__slug"))
    base = CompiledQuerySet("test.members", members.order_by("pk"))
    for team in teams[1:3]:
        found = base.filter(tenant_id=team.pk).first()
        assert isinstance(found, Membership)
        assert found.tenant == team
        assert found.slug == team.slug
        assert found.user.username == found.user.get_username()
    assert base.filter(tenant_id=teams[0].pk).first() is None


def test_evaluated_together_querysets_give_their_own_rows_and_are_not_read_again() -> None:
    teams = _teams()
    names = CompiledQuerySet("test.together-names", Tenant.objects.values("slug"))
    wanted = names.filter(pk__in=[teams[0].pk, teams[2].pk]).order_by("slug")
    first = (
        CompiledQuerySet("test.together-first", Tenant.objects.all()).filter(slug="team-4").head()
    )
    nothing = names.none()
    rows = compiled_query.evaluate_together(wanted, first, nothing)
    assert rows == [[{"slug": "team-0"}, {"slug": "team-2"}], [teams[4]], []]
    with CaptureQueriesContext(connection) as ctx:
        assert list(wanted) == rows[0]
        assert list(first) == [teams[4]]
    assert len(ctx.captured_queries) == 0


def test_items_evaluated_together_run_in_order_each_seeing_the_ones_before() -> None:
    team = TenantFactory(slug="renamed", name="Before")
    table = connection.ops.quote_name(Tenant._meta.db_table)
    rename = (f"UPDATE {table} SET name = %s WHERE id = %s", ["After", team.pk])
    name = CompiledQuerySet("test.together-name", Tenant.objects.values("name")).filter(pk=team.pk)
    _, rows = compiled_query.evaluate_together(rename, name)
    assert rows == [{"name": "After"}]
    # a shape that does not compile (a transformed value) still runs after the statement
    again = (f"UPDATE {table} SET name = %s WHERE id = %s", ["Again", team.pk])
    contains = CompiledQuerySet("test.together-contains", Tenant.objects.values("name"))
    _, rows = compiled_query.evaluate_together(again, contains.filter(name__icontains="again"))
    assert rows == [{"name": "Again"}]
