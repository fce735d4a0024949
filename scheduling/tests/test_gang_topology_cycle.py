"""Topology-aware jobs end to end: node labels from inventory, the job API field, the cycle's placement
and waiting reason, a pool's own levels, the cluster page."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from portal.errors import InvalidInput
from scheduling import services
from scheduling.backends.base import GpuInventory, NodeInventory
from scheduling.choices import GangState, WorkloadState
from scheduling.inventory import sync_inventory_rows
from scheduling.models import Gang, Placement, Workload
from scheduling.services.snapshot import ensure_shard
from scheduling.tests.factories import make_group, make_quota

pytestmark = pytest.mark.django_db

RACK = "tessera.io/topology-rack"
BLOCK = "tessera.io/topology-block"


def racked_inventory(racks: int = 2, nodes: int = 2, gpus: int = 8) -> None:
    """``racks`` racks (one block) of ``nodes`` nodes, dealt in turn: n0 in r0, n1 in r1, ..."""
    inv = [
        NodeInventory(
            name=f"n{i}",
            cpu_milli=64000,
            memory_mib=512 * 1024,
            gpu_model="H100",
            labels=(("pool", "training"), (BLOCK, "b0"), (RACK, f"r{i % racks}")),
            gpus=tuple(
                GpuInventory(index=j, uuid=f"GPU-n{i}-{j}", model="H100", memory_mib=81920)
                for j in range(gpus)
            ),
        )
        for i in range(racks * nodes)
    ]
    sync_inventory_rows(inv)


def submit_job(quota: Any, name: str, pods: int, gpus: int, **kw: Any) -> Gang:
    member = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": gpus, "gpu_milli": 1000}
    return services.submit_gang(
        tenant=quota.tenant, quota=quota, name=name, owner=None, members=[member] * pods,
        min_available=pods, timeout_seconds=600, **kw,
    )  # fmt: skip


def racks_of(gang: Gang) -> set[str]:
    nodes = Placement.objects.filter(workload__gang=gang, released_at__isnull=True)
    return {p.node.labels[RACK] for p in nodes.select_related("node")}


def test_a_job_required_in_one_rack_lands_in_one_rack_though_node_order_interleaves_racks() -> None:
    racked_inventory()
    q = make_quota(make_group())
    gang = submit_job(q, "train", 4, 4, topology_level="rack")
    services.run_cycle(q.group_id)
    gang.refresh_from_db()
    assert gang.state == GangState.PLACED
    assert len(racks_of(gang)) == 1


def test_a_job_no_rack_holds_waits_with_the_level_and_the_largest_free_rack() -> None:
    racked_inventory()
    q = make_quota(make_group())
    submit_job(q, "blocker", 1, 2)  # a pod on n0 (rack r0): r0 has 14 GPUs free, r1 16
    services.run_cycle(q.group_id)
    gang = submit_job(q, "big", 3, 8, topology_level="rack")  # 24 GPUs: more than a rack
    services.run_cycle(q.group_id)
    members = list(gang.members.all())
    assert {m.state for m in members} == {WorkloadState.PENDING}
    assert {m.pending_code for m in members} == {"gang_topology"}
    assert "requires its 3 pods in one rack" in members[0].pending_reason
    assert "the largest free rack is r1 with 16 GPUs free" in members[0].pending_reason
    assert not Placement.objects.filter(workload__gang=gang).exists()


def test_a_preferred_job_that_fits_no_rack_is_placed_across_racks() -> None:
    racked_inventory()
    q = make_quota(make_group())
    gang = submit_job(q, "big", 3, 8, topology_level="rack", topology_mode="preferred")
    services.run_cycle(q.group_id)
    gang.refresh_from_db()
    assert gang.state == GangState.PLACED
    assert len(racks_of(gang)) == 2


def test_a_pool_with_its_own_levels_uses_them() -> None:
    racked_inventory()
    q = make_quota(make_group())
    shard = ensure_shard(q.group_id)
    shard.topology_levels = [["row", BLOCK]]
    shard.full_clean()
    shard.save()
    gang = submit_job(q, "train", 3, 8, topology_level="row")
    services.run_cycle(q.group_id)
    gang.refresh_from_db()
    assert gang.state == GangState.PLACED
    with pytest.raises(InvalidInput) as err:
        submit_job(q, "other", 1, 1, topology_level="rack")
    assert err.value.fields == {
        "topology_level": ["One of row (widest first), or blank for anywhere."]
    }


@pytest.mark.parametrize(
    "levels",
    [
        [["rack"]],
        [["Rack", RACK]],
        [["rack", "bad key!"]],
        [["rack", RACK], ["rack", BLOCK]],
        "rack",
    ],
)
def test_a_pool_topology_that_is_not_a_list_of_valid_pairs_is_refused(levels: Any) -> None:
    shard = ensure_shard(make_group().pk)
    shard.topology_levels = levels
    with pytest.raises(ValidationError) as err:
        shard.full_clean()
    assert "topology_levels" in err.value.message_dict


def test_submit_refuses_an_unknown_level_or_mode_naming_the_field() -> None:
    racked_inventory()
    q = make_quota(make_group())
    with pytest.raises(InvalidInput) as err:
        submit_job(q, "a", 1, 1, topology_level="galaxy")
    assert "topology_level" in err.value.fields
    with pytest.raises(InvalidInput) as err:
        submit_job(q, "b", 1, 1, topology_level="rack", topology_mode="maybe")
    assert "topology_mode" in err.value.fields
    assert not Workload.objects.exists()


def test_job_api_takes_and_shows_the_topology_and_refuses_a_bad_level_with_400(
    alice: Any, api_as: Any, team_a: Any
) -> None:
    racked_inventory()
    make_quota(make_group(), team_a, name="team-a")
    body = {
        "name": "train",
        "pods": 2,
        "member": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 8},
        "topology_level": "rack",
    }
    r = api_as(alice).post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 201, r.json()
    assert (r.json()["topology_level"], r.json()["topology_mode"]) == ("rack", "required")
    r = api_as(alice).post(
        "/api/v1/jobs/", {**body, "name": "other", "topology_level": "x" * 33}, format="json"
    )
    assert r.status_code == 400
    assert "topology_level" in r.json()["error"]["fields"]
    r = api_as(alice).post(
        "/api/v1/jobs/", {**body, "name": "other", "topology_level": "shelf"}, format="json"
    )
    assert r.status_code == 400
    assert "topology_level" in r.json()["error"]["fields"]
    assert Gang.objects.count() == 1


def test_the_cluster_page_shows_each_pools_racks_with_free_gpus(client: Any, alice: Any) -> None:
    racked_inventory()
    client.force_login(alice)
    q = make_quota(make_group())
    submit_job(q, "busy", 1, 3)
    services.run_cycle(q.group_id)  # 3 GPUs of n0 (rack r0) taken
    page = client.get("/cluster/").content.decode()
    section = page[page.index('data-testid="topology"') :]
    # block b0: 4 nodes, 32 GPUs, 29 free; racks nested in it (no zone label: the level is skipped)
    assert "<td>b0</td><td>block</td><td>4</td><td>32</td><td>29</td>" in section.replace(
        '<td style="padding-left: 0.5em">', "<td>"
    )
    rows = section.replace('<td style="padding-left: 1.5em">', "<td>")
    assert "<td>r0</td><td>rack</td><td>2</td><td>16</td><td>13</td>" in rows
    assert "<td>r1</td><td>rack</td><td>2</td><td>16</td><td>16</td>" in rows
