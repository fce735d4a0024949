"""The scoping module limits every queryset to the user's tenants; other tenants' rows answer 404."""

import pytest
from django.http import Http404

from portal.scoping import get_scoped_or_404, scope_queryset, tenants_for
from quotas.models import Quota, QuotaGroup

pytestmark = pytest.mark.django_db


@pytest.fixture
def quotas(team_a, team_b):
    group = QuotaGroup.objects.create(name="pool-a")
    return (
        Quota.objects.create(group=group, tenant=team_a, name="team-a"),
        Quota.objects.create(group=group, tenant=team_b, name="team-b"),
    )


def test_member_sees_only_own_tenant_rows(bob, quotas):
    visible = scope_queryset(Quota.objects.all(), bob)
    assert list(visible) == [quotas[0]]


def test_member_of_tenant_a_gets_404_for_tenant_b_object(bob, quotas):
    with pytest.raises(Http404):
        get_scoped_or_404(Quota.objects.all(), bob, pk=quotas[1].pk)


def test_operator_sees_every_tenant(operator, quotas):
    assert set(scope_queryset(Quota.objects.all(), operator)) == set(quotas)
    assert tenants_for(operator).count() == 2


def test_anonymous_sees_nothing(quotas):
    from django.contrib.auth.models import AnonymousUser

    assert scope_queryset(Quota.objects.all(), AnonymousUser()).count() == 0


def test_scoping_follows_a_relation_path(bob, quotas):
    visible = scope_queryset(Quota.objects.all(), bob, tenant_field="group__quotas__tenant")
    assert quotas[0].group in [q.group for q in visible]


def test_api_answers_404_not_403_for_other_tenant(api_as, bob, team_b):
    response = api_as(bob).get(f"/api/v1/tenants/{team_b.pk}/")
    assert response.status_code == 404
    assert response.json() == {
        "error": {"code": "not_found", "message": "Not found.", "fields": {}}
    }
