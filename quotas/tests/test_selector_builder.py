"""Issue 16: the quota-group node-selector builder. Keys and values come from the inventory, a
preview (JSON for the page's script, or a button without it) shows the nodes and GPUs a selector
matches, and a selector overlapping another group is refused before saving, naming both."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from quotas.models import QuotaGroup
from quotas.tests.factories import QuotaGroupFactory, make_node

pytestmark = pytest.mark.django_db


def client_for(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def inventory() -> None:
    make_node("t-h100-0", pool="training", gpu_count=2)
    make_node("t-h100-1", pool="training", gpu_count=2)
    make_node("t-l40s-0", pool="training", gpu_count=4, gpu_model="L40S")
    make_node("b-l40s-0", pool="batch", gpu_count=1, gpu_model="L40S")
    QuotaGroupFactory(name="batch", node_selector={"pool": "batch"})


def rows(*pairs: tuple[str, str]) -> dict[str, str]:
    data: dict[str, str] = {}
    for i, (key, value) in enumerate(pairs):
        data[f"selector_key_{i}"] = key
        data[f"selector_value_{i}"] = value
    return data


def test_group_form_offers_the_inventory_label_keys_and_values(
    operator: Any, inventory: None
) -> None:
    html = client_for(operator).get("/quotas/groups/new/").content.decode()
    assert (
        '<datalist id="label-keys"><option value="gpu-model"><option value="pool"></datalist>'
        in (html)
    )
    assert (
        '<datalist id="label-values-1" data-for-key="pool"><option value="batch">'
        '<option value="training"></datalist>'
    ) in html


def test_preview_counts_matching_nodes_and_gpus_by_model(operator: Any, inventory: None) -> None:
    r = client_for(operator).get(
        "/quotas/groups/selector-preview/", rows(("pool", "training"), ("gpu-model", "H100"))
    )
    assert r.status_code == 200
    assert r.json() == {
        "node_count": 2,
        "nodes": ["t-h100-0", "t-h100-1"],
        "gpu_count": 4,
        "gpus_by_model": {"H100": 4},
        "conflicts": [],
    }
    whole_pool = client_for(operator).get(
        "/quotas/groups/selector-preview/", rows(("pool", "training"))
    )
    assert whole_pool.json()["gpus_by_model"] == {"H100": 4, "L40S": 4}


def test_preview_names_the_group_and_nodes_a_selector_overlaps(
    operator: Any, inventory: None
) -> None:
    r = client_for(operator).get("/quotas/groups/selector-preview/", rows(("gpu-model", "L40S")))
    assert r.json()["conflicts"] == [
        {"group": "batch", "selector": {"pool": "batch"}, "nodes": ["b-l40s-0"]}
    ]
    # the group being edited does not overlap itself
    batch = QuotaGroup.objects.get(name="batch")
    own = client_for(operator).get(
        "/quotas/groups/selector-preview/", {**rows(("pool", "batch")), "group": str(batch.pk)}
    )
    assert own.json()["conflicts"] == []


@pytest.mark.parametrize(
    ("_case", "query", "field"),
    [
        ("value without key", {"selector_value_0": "training"}, "selector_key_0"),
        ("key without value", {"selector_key_0": "pool"}, "selector_value_0"),
        (
            "value too long",
            {"selector_key_0": "pool", "selector_value_0": "x" * 64},
            "selector_value_0",
        ),
        ("group not a number", {"group": "batch"}, "group"),
    ],
)
def test_preview_refuses_bad_rows_naming_the_field(
    _case: str, query: dict[str, str], field: str, operator: Any, inventory: None
) -> None:
    r = client_for(operator).get("/quotas/groups/selector-preview/", query)
    assert r.status_code == 400
    assert list(r.json()["fields"]) == [field]


@pytest.mark.parametrize(("_case", "persona"), [("admin", "alice"), ("member", "bob")])
def test_preview_is_for_operators_only(_case: str, persona: str, request: Any) -> None:
    r = client_for(request.getfixturevalue(persona)).get("/quotas/groups/selector-preview/")
    assert r.status_code == 404


def test_the_preview_button_works_without_javascript_and_saves_nothing(
    operator: Any, inventory: None
) -> None:
    r = client_for(operator).post(
        "/quotas/groups/new/", {"name": "l40s", **rows(("gpu-model", "L40S")), "preview": "1"}
    )
    assert r.status_code == 200
    html = r.content.decode()
    assert "Matches 2 nodes and 5 GPUs</strong> (5 × L40S)." in html
    assert "Overlaps group batch on b-l40s-0" in html
    assert not QuotaGroup.objects.filter(name="l40s").exists()


def test_saving_an_overlapping_selector_is_refused_naming_the_group_and_nodes(
    operator: Any, inventory: None
) -> None:
    r = client_for(operator).post(
        "/quotas/groups/new/", {"name": "l40s", **rows(("gpu-model", "L40S"))}
    )
    assert r.status_code == 200
    errors = r.context["form"].non_field_errors()
    assert len(errors) == 1
    assert 'as group batch {"pool": "batch"}' in errors[0]
    assert "both match b-l40s-0 now" in errors[0]
    assert not QuotaGroup.objects.filter(name="l40s").exists()
    # telling them apart saves it
    ok = client_for(operator).post(
        "/quotas/groups/new/",
        {"name": "l40s", **rows(("gpu-model", "L40S"), ("pool", "training"))},
    )
    assert ok.status_code == 302
    assert QuotaGroup.objects.get(name="l40s").node_selector == {
        "gpu-model": "L40S",
        "pool": "training",
    }


def test_editing_a_group_fills_the_builder_rows(operator: Any, inventory: None) -> None:
    batch = QuotaGroup.objects.get(name="batch")
    form = client_for(operator).get(f"/quotas/groups/{batch.pk}/edit/").context["form"]
    assert (form["selector_key_0"].value(), form["selector_value_0"].value()) == ("pool", "batch")


def test_deleting_a_quota_asks_once_on_a_page_saying_what_happens(operator: Any) -> None:
    from quotas.models import Quota
    from quotas.tests.factories import QuotaFactory

    quota = QuotaFactory(name="team-x")
    c = client_for(operator)
    detail = c.get(f"/quotas/{quota.pk}/").content.decode()
    assert f'href="/quotas/{quota.pk}/delete/"' in detail
    assert "data-confirm" not in detail
    page = c.get(f"/quotas/{quota.pk}/delete/")
    assert page.status_code == 200
    assert (
        f"Quota team-x of team {quota.tenant.slug} leaves group {quota.group.name}"
        in page.content.decode()
    )
    assert f'name="version" value="{quota.version}"' in page.content.decode()
    assert Quota.objects.filter(pk=quota.pk).exists()
    assert c.post(f"/quotas/{quota.pk}/delete/", {"version": quota.version}).status_code == 302
    assert not Quota.objects.filter(pk=quota.pk).exists()
