"""Quota pages: who sees what, form errors inline, stale edits, what-if JSON, history."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from core.units import from_base
from portal.tests.factories import TenantFactory
from quotas.forms import UNIT_OF
from quotas.models import RESOURCE_FIELDS, Quota, QuotaChange, QuotaGroup
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node, make_workload

pytestmark = pytest.mark.django_db

BIG = {"gpu_max_gpu_memory_mib": 10**7, "gpu_max_cpu_milli": 10**6, "gpu_max_memory_mib": 10**8}


@pytest.fixture
def setup(team_a, team_b):
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=8)
    qa = QuotaFactory(
        group=group, tenant=team_a, gpu_min_gpu_milli=1000, gpu_max_gpu_milli=4000, **BIG
    )
    qb = QuotaFactory(
        group=group, tenant=team_b, gpu_min_gpu_milli=2000, gpu_max_gpu_milli=8000, **BIG
    )
    return group, qa, qb


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form_data(quota: Quota, **overrides):
    data = {name: getattr(quota, name) for name in RESOURCE_FIELDS}
    data.update(shared_weight="", lend_idle_min="on", note="", version=quota.version)
    data.update(overrides)
    # the form speaks GPUs, cores and GiB: the amounts above (milli, MiB) as a person types them
    for name in RESOURCE_FIELDS:
        if isinstance(data.get(name), int):
            data[name] = from_base(data[name], UNIT_OF[name.split("_", 2)[2]])
    return data


@pytest.mark.parametrize(
    ("_case", "persona", "index", "group", "quota_a", "edit_a", "what_if"),
    [
        ("tenant admin", "alice", 200, 404, 200, 403, 404),
        ("member", "bob", 200, 404, 200, 403, 404),
        ("other tenant", "charlie", 200, 404, 404, 404, 404),
        ("operator", "operator", 200, 200, 200, 200, 200),
    ],
)
def test_page_authorization_matrix(
    setup, request, _case, persona, index, group, quota_a, edit_a, what_if
):
    grp, qa, _ = setup
    client = client_for(request.getfixturevalue(persona))
    assert client.get("/quotas/").status_code == index
    assert client.get(f"/quotas/groups/{grp.pk}/").status_code == group
    assert client.get(f"/quotas/{qa.pk}/").status_code == quota_a
    assert client.get(f"/quotas/{qa.pk}/edit/").status_code == edit_a
    assert client.post(f"/quotas/{qa.pk}/what-if/", _form_data(qa)).status_code == what_if
    before = list(Quota.objects.values())
    client.post(f"/quotas/{qa.pk}/edit/", _form_data(qa, gpu_max_gpu_milli=5000))
    if persona != "operator":
        assert list(Quota.objects.values()) == before


def test_member_sees_own_quota_with_headroom_and_not_others(setup, bob):
    _, qa, _ = setup
    make_workload(qa, gpu_count=1)
    page = client_for(bob).get("/quotas/").content.decode()
    assert "You can start 3 more GPUs now, borrowed from idle capacity (none guaranteed)." in page
    assert "team-b" not in page


def test_operator_tree_shows_capacity_and_leaves(setup, operator):
    grp, qa, _ = setup
    make_workload(qa, gpu_count=3)
    page = client_for(operator).get(f"/quotas/groups/{grp.pk}/").content.decode()
    assert "8 GPUs" in page  # capacity
    assert 'data-testid="leaf-team-a"' in page
    assert "borrowed 2 GPUs" in page  # 3 used, min 1
    assert "nodes: pool=training" in page


def test_edit_min_above_max_shows_inline_error_and_saves_nothing(setup, operator):
    _, qa, _ = setup
    response = client_for(operator).post(
        f"/quotas/{qa.pk}/edit/", _form_data(qa, gpu_min_gpu_milli=5000)
    )
    assert response.status_code == 200
    assert response.context["form"].errors == {
        "gpu_min_gpu_milli": ["Min 5 GPUs is more than max 4 GPUs (GPU side)."]
    }
    assert Quota.objects.get(pk=qa.pk).version == 1
    assert QuotaChange.objects.count() == 0


def test_edit_saves_with_history_and_redirects_to_the_tree(setup, operator):
    grp, qa, _ = setup
    response = client_for(operator).post(
        f"/quotas/{qa.pk}/edit/", _form_data(qa, gpu_max_gpu_milli=6000, note="more room")
    )
    assert response.status_code == 302
    assert response["Location"] == f"/quotas/groups/{grp.pk}/"
    assert Quota.objects.get(pk=qa.pk).gpu_max_gpu_milli == 6000
    change = QuotaChange.objects.get()
    assert (change.actor, change.note, change.changed_fields()) == (
        operator,
        "more room",
        [("gpu_max_gpu_milli", 4000, 6000)],
    )
    detail = client_for(operator).get(f"/quotas/{qa.pk}/").content.decode()
    assert "GPU side max GPU: 4 GPUs → <strong>6 GPUs</strong>" in detail


def test_stale_form_says_someone_else_saved_first(setup, operator):
    _, qa, _ = setup
    stale = _form_data(qa, gpu_max_gpu_milli=5000)
    client = client_for(operator)
    assert (
        client.post(f"/quotas/{qa.pk}/edit/", _form_data(qa, gpu_max_gpu_milli=6000)).status_code
        == 302
    )
    response = client.post(f"/quotas/{qa.pk}/edit/", stale)
    assert response.status_code == 200
    assert response.context["form"].non_field_errors() == [
        "Someone else saved this quota first (it is now at version 2). Your edit was not saved: reload "
        "the page to see their change, then apply yours again."
    ]
    assert Quota.objects.get(pk=qa.pk).gpu_max_gpu_milli == 6000


def test_what_if_json_and_preview_button(setup, operator):
    _, qa, qb = setup
    make_workload(qa, state="pending", gpu_count=4, cpu_milli=0, memory_mib=0)
    make_workload(qb, state="pending", gpu_count=8, cpu_milli=0, memory_mib=0)
    client = client_for(operator)
    body = client.post(f"/quotas/{qa.pk}/what-if/", _form_data(qa, gpu_min_gpu_milli=4000)).json()
    rows = {r["name"]: (r["gpu_before"], r["gpu_after"]) for r in body["rows"]}
    # before: a=1 + 5 idle split 4000:8000 → a ≈ 2.667, b ≈ 5.333; after: a=4 (its min), b=4
    assert rows == {"team-a": ("2.67 GPUs", "4 GPUs"), "team-b": ("5.33 GPUs", "4 GPUs")}
    bad = client.post(f"/quotas/{qa.pk}/what-if/", _form_data(qa, gpu_min_gpu_milli=9000))
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {
        "gpu_min_gpu_milli": ["Min 9 GPUs is more than max 4 GPUs (GPU side)."]
    }
    page = client.post(
        f"/quotas/{qa.pk}/edit/", {**_form_data(qa, gpu_min_gpu_milli=4000), "preview": "1"}
    )
    assert page.status_code == 200
    assert [r["name"] for r in page.context["preview"]] == ["team-a", "team-b"]
    assert Quota.objects.get(pk=qa.pk).gpu_min_gpu_milli == 1000


def test_create_group_and_quota_through_pages(operator, team_a):
    make_node("b1", pool="batch", gpu_count=2)
    client = client_for(operator)
    response = client.post(
        "/quotas/groups/new/",
        {"name": "batch", "selector_key_0": "pool", "selector_value_0": "batch"},
    )
    group = QuotaGroup.objects.get(name="batch")
    assert response["Location"] == f"/quotas/groups/{group.pk}/"
    assert group.node_selector == {"pool": "batch"}
    bad = client.post("/quotas/groups/new/", {"name": "x", "selector_key_0": "pool"})
    assert bad.context["form"].errors["selector_value_0"] == ["Give label pool a value."]
    data: dict[str, Any] = dict.fromkeys(RESOURCE_FIELDS, "0")
    # typed in GPUs, as the page asks
    data.update(
        tenant="team-a", name="", gpu_min_gpu_milli="3", gpu_max_gpu_milli="3", lend_idle_min="on"
    )
    refused = client.post(f"/quotas/groups/{group.pk}/quotas/new/", data)
    assert (
        "more than its capacity of 2 GPUs" in refused.context["form"].errors["gpu_min_gpu_milli"][0]
    )
    data.update(gpu_min_gpu_milli="1")
    created = client.post(f"/quotas/groups/{group.pk}/quotas/new/", data)
    assert created.status_code == 302
    quota = Quota.objects.get(group=group)
    assert (quota.name, quota.gpu_min_gpu_milli, quota.gpu_max_gpu_milli) == ("team-a", 1000, 3000)


def test_delete_quota_page(setup, operator):
    grp, qa, _ = setup
    client = client_for(operator)
    make_workload(qa, gpu_count=1)
    refused = client.post(f"/quotas/{qa.pk}/delete/", {"version": 1}, follow=True)
    assert "still reference quota team-a" in refused.content.decode()
    empty = QuotaFactory(group=grp, tenant=TenantFactory(slug="empty"))
    done = client.post(f"/quotas/{empty.pk}/delete/", {"version": 1})
    assert done["Location"] == f"/quotas/groups/{grp.pk}/"
    assert not Quota.objects.filter(pk=empty.pk).exists()
