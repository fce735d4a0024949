"""Admin: pages load; edits go through the services (audit row, version), invalid edits change nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from quotas.models import RESOURCE_FIELDS, Quota, QuotaChange, QuotaGroup
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_for(operator):
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def quota(team_a):
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=4)
    services_change = QuotaFactory(
        group=group, tenant=team_a, gpu_min_gpu_milli=1000, gpu_max_gpu_milli=2000
    )
    return services_change


def _admin_data(quota: Quota, **overrides):
    data = {name: getattr(quota, name) for name in RESOURCE_FIELDS}
    data.update(shared_weight="", lend_idle_min="on", expected_version=quota.version, note="")
    data.update(overrides)
    return data


@pytest.mark.parametrize(
    "url",
    [
        "/admin/quotas/quota/",
        "/admin/quotas/quotagroup/",
        "/admin/quotas/quotachange/",
        "/admin/quotas/quota/add/",
        "/admin/quotas/quotagroup/add/",
    ],
)
def test_admin_pages_load(admin_client_for, quota, url):
    assert admin_client_for.get(url).status_code == 200


def test_admin_change_pages_load(admin_client_for, quota):
    assert admin_client_for.get(f"/admin/quotas/quota/{quota.pk}/change/").status_code == 200
    assert (
        admin_client_for.get(f"/admin/quotas/quotagroup/{quota.group_id}/change/").status_code
        == 200
    )


def test_admin_edit_goes_through_the_service(admin_client_for, quota, operator):
    response = admin_client_for.post(
        f"/admin/quotas/quota/{quota.pk}/change/",
        _admin_data(quota, gpu_max_gpu_milli=3000, note="admin"),
    )
    assert response.status_code == 302
    saved = Quota.objects.get(pk=quota.pk)
    assert (saved.gpu_max_gpu_milli, saved.version) == (3000, 2)
    change = QuotaChange.objects.get()
    assert (change.actor, change.note, change.changed_fields()) == (
        operator,
        "admin",
        [("gpu_max_gpu_milli", 2000, 3000)],
    )


@pytest.mark.parametrize(
    ("_case", "overrides", "field"),
    [
        ("min above max", {"gpu_min_gpu_milli": 3000}, "gpu_min_gpu_milli"),
        (
            "mins above capacity",
            {"gpu_min_gpu_milli": 5000, "gpu_max_gpu_milli": 5000},
            "gpu_min_gpu_milli",
        ),
        ("stale version", {"expected_version": 7}, None),
    ],
)
def test_admin_invalid_edit_changes_nothing(admin_client_for, quota, _case, overrides, field):
    before = list(Quota.objects.values())
    response = admin_client_for.post(
        f"/admin/quotas/quota/{quota.pk}/change/", _admin_data(quota, **overrides)
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field or "__all__"]
    assert list(Quota.objects.values()) == before
    assert QuotaChange.objects.count() == 0


def test_admin_add_quota_and_group(admin_client_for, quota, team_b):
    data: dict[str, Any] = dict.fromkeys(RESOURCE_FIELDS, 0)
    data.update(
        group=quota.group_id,
        tenant=team_b.pk,
        name="team-b",
        lend_idle_min="on",
        gpu_min_gpu_milli=1000,
        gpu_max_gpu_milli=1000,
    )
    assert admin_client_for.post("/admin/quotas/quota/add/", data).status_code == 302
    assert QuotaChange.objects.get(action="created").subject_name == "training/team-b"
    response = admin_client_for.post(
        "/admin/quotas/quotagroup/add/",
        {"name": "batch", "node_selector": '{"pool": "batch"}', "description": ""},
    )
    assert response.status_code == 302
    assert QuotaGroup.objects.get(name="batch").node_selector == {"pool": "batch"}
    assert QuotaChange.objects.filter(subject="group", action="created").count() == 1
