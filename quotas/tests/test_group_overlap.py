"""Quota groups never share a node (issue item 2): overlapping selectors are refused on every path, and
a node that two groups match anyway (an inventory change, groups made before the rule) counts toward one
group only (the oldest), is logged, and is flagged on the page and in the API."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from portal.errors import InvalidInput
from quotas import services
from quotas.models import QuotaChange, QuotaGroup
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node
from quotas.usage import group_capacity, node_overlaps
from scheduling.backends.base import GpuInventory, NodeInventory
from scheduling.inventory import sync_inventory_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def training() -> QuotaGroup:
    """The `training` group with two 4-GPU nodes (labels pool=training, gpu-model=H100)."""
    group = QuotaGroupFactory(name="training", node_selector={"pool": "training"})
    make_node("t1", pool="training", gpu_count=4)
    make_node("t2", pool="training", gpu_count=4)
    return group


@pytest.mark.parametrize(
    ("_case", "selector"),
    [
        ("same selector", {"pool": "training"}),
        ("empty selector matches every node", {}),
        ("narrower selector (a subset of its nodes)", {"pool": "training", "gpu-model": "H100"}),
        ("other key: a node could carry both labels", {"gpu-model": "H100"}),
    ],
)
def test_group_whose_selector_can_match_another_groups_nodes_is_refused(
    _case: str, selector: dict[str, str], training: QuotaGroup
) -> None:
    # given the training group; when a second group with an overlapping selector is created
    with pytest.raises(InvalidInput) as refused:
        services.create_group(name="second", node_selector=selector)
    # then it is refused on node_selector, naming the group in conflict; nothing is written
    message = refused.value.fields["node_selector"][0]
    assert "training" in message
    assert not QuotaGroup.objects.filter(name="second").exists()
    assert not QuotaChange.objects.exists()


def test_refusal_names_the_nodes_both_selectors_match_now(training: QuotaGroup) -> None:
    with pytest.raises(InvalidInput) as refused:
        services.create_group(name="second", node_selector={"pool": "training"})
    assert "t1, t2" in refused.value.fields["node_selector"][0]


def test_disjoint_selector_is_accepted(training: QuotaGroup) -> None:
    saved = services.create_group(name="inference", node_selector={"pool": "inference"})
    assert saved.obj.node_selector == {"pool": "inference"}


def test_selector_change_into_another_groups_nodes_is_refused(training: QuotaGroup) -> None:
    # given a disjoint group; when its selector is changed to one that overlaps training's
    other = services.create_group(name="inference", node_selector={"pool": "inference"}).obj
    with pytest.raises(InvalidInput) as refused:
        services.update_group(other, expected_version=1, node_selector={"gpu-model": "H100"})
    # then it is refused and unchanged
    assert "training" in refused.value.fields["node_selector"][0]
    other.refresh_from_db()
    assert (other.node_selector, other.version) == ({"pool": "inference"}, 1)


def test_api_and_form_refuse_an_overlapping_group(
    training: QuotaGroup, api_as: Any, operator: Any
) -> None:
    # through the API: a 400 with the field and the reason
    r = api_as(operator).post(
        "/api/v1/quota-groups/",
        {"name": "second", "node_selector": {"pool": "training"}},
        format="json",
    )
    assert r.status_code == 400
    assert "training" in r.json()["error"]["fields"]["node_selector"][0]
    # through the page: a form error on the selector
    client = Client()
    client.force_login(operator)
    page = client.post("/quotas/groups/new/", {"name": "second"})  # no builder rows: {}
    assert page.status_code == 200
    assert "training" in page.context["form"].non_field_errors()[0]
    assert not QuotaGroup.objects.filter(name="second").exists()


@pytest.fixture
def legacy_overlap(training: QuotaGroup) -> QuotaGroup:
    """A group made before the rule (straight in the database) with training's selector, and a quota in
    it whose min promises all the GPUs."""
    second = QuotaGroupFactory(name="second", node_selector={"pool": "training"})
    QuotaGroup.objects.filter(pk=second.pk).update(created_at=timezone.now() + timedelta(seconds=1))
    second.refresh_from_db()
    QuotaFactory(group=second, gpu_min_gpu_milli=8000, gpu_max_gpu_milli=8000)
    return second


def test_a_node_two_groups_match_counts_toward_the_oldest_only(
    training: QuotaGroup, legacy_overlap: QuotaGroup
) -> None:
    # given two groups selecting the same two nodes; when their capacities are read
    first, second = group_capacity(training), group_capacity(legacy_overlap)
    # then the 8 GPUs count once: toward training, the older group
    assert (first.gpu.gpu_milli, second.gpu.gpu_milli) == (8000, 0)
    assert (first.nodes_counted, second.nodes_counted) == (2, 0)
    # and both groups report the shared nodes and where they count
    assert [(o.node, o.groups, o.counted_in) for o in node_overlaps(legacy_overlap)] == [
        ("t1", ("training", "second"), "training"),
        ("t2", ("training", "second"), "training"),
    ]
    assert len(node_overlaps(training)) == 2


def test_overlap_is_flagged_in_the_api_and_on_the_quota_tree_page(
    training: QuotaGroup, legacy_overlap: QuotaGroup, api_as: Any, operator: Any
) -> None:
    body = api_as(operator).get(f"/api/v1/quota-groups/{legacy_overlap.pk}/").json()
    assert body["capacity"]["gpu"]["gpu_milli"] == 0
    assert body["overlaps"] == [
        {"node": "t1", "groups": ["training", "second"], "counted_in": "training"},
        {"node": "t2", "groups": ["training", "second"], "counted_in": "training"},
    ]
    client = Client()
    client.force_login(operator)
    page = client.get(f"/quotas/groups/{legacy_overlap.pk}/").content.decode()
    assert "also selected by another group" in page
    assert "t1" in page


def test_inventory_change_that_makes_groups_overlap_is_logged(
    caplog: Any, training: QuotaGroup, legacy_overlap: QuotaGroup
) -> None:
    # given a third, legacy group on label zone=a; when a training node is synced with that label
    QuotaGroupFactory(name="zone-a", node_selector={"zone": "a"})
    node = NodeInventory(
        name="t3",
        cpu_milli=64000,
        memory_mib=512 * 1024,
        gpu_model="H100",
        labels=(("pool", "training"), ("zone", "a")),
        gpus=(GpuInventory(index=0, uuid="GPU-t3-0", model="H100", memory_mib=81920),),
    )
    with caplog.at_level(logging.WARNING, logger="quotas.usage"):
        sync_inventory_rows([node])
    # then the operators' log names the node, the groups and where it counts
    logged = [r.getMessage() for r in caplog.records if "t3" in r.getMessage()]
    assert logged == [
        "Node t3 is selected by several quota groups (training, zone-a, second); it counts "
        "toward training only."
    ]
