"""MIG workloads on a `mig` pool: submitted with a profile, placed by the MIG engine (card + position),
counted in GPU-equivalents, their position freed on release."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from portal.errors import InvalidInput
from quotas import services as quota_services
from scheduling import services
from scheduling.choices import WorkloadState
from scheduling.inventory import sync_inventory_rows
from scheduling.models import Node, PlacementGpu, Workload
from scheduling.telemetry import fragmentation as frag
from scheduling.tests.factories import gpu_node, make_quota

pytestmark = pytest.mark.django_db


@pytest.fixture
def mig_quota() -> Any:
    sync_inventory_rows([gpu_node("h100-01", "H100-80GB", 80, gpus=2, pool="isolated")])
    group = quota_services.create_group(
        name="isolated",
        node_selector={"pool": "isolated"},
        sharing_mode="mig",
        mig_profiles=["1g.10gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    ).obj
    return make_quota(group)


def _submit(quota: Any, name: str, **gpu: Any) -> Workload:
    return services.submit_workload(
        tenant=quota.tenant,
        quota=quota,
        kind="job_pod",
        name=name,
        cpu_milli=1000,
        memory_mib=1024,
        **gpu,
    )


def _slots() -> dict[str, tuple[str, int, str, int | None]]:
    return {
        s.placement.workload.name: (s.gpu.node.name, s.gpu.index, s.mig_profile, s.mig_start)
        for s in PlacementGpu.objects.filter(placement__released_at__isnull=True).select_related(
            "placement__workload", "gpu__node"
        )
    }


def test_a_mig_pool_places_profiles_on_card_and_position(mig_quota: Any) -> None:
    big = _submit(mig_quota, "big", mig_profile="3g.40gb")
    small = _submit(mig_quota, "small", mig_profile="1g.10gb")
    assert (big.gpu_count, big.gpu_milli, big.gpu_memory_mib) == (1, 428, 40960)
    assert (small.gpu_count, small.gpu_milli, small.gpu_memory_mib) == (1, 142, 10240)
    report = services.run_cycle(mig_quota.group_id)
    assert report.placed == 2
    # packing: the 3g and the 1g share card 0; the 3g at 4 leaves 0-3 free for a 4g-sized hole
    slots = _slots()
    assert slots["big"][:3] == ("h100-01", 0, "3g.40gb")
    assert slots["small"][:3] == ("h100-01", 0, "1g.10gb")
    assert {slots["big"][3], slots["small"][3]} & {None} == set()
    shares = {
        s.placement.workload.name: s.gpu_milli
        for s in PlacementGpu.objects.select_related("placement__workload")
    }
    assert shares == {"big": 428, "small": 142}


def test_seven_small_instances_fill_one_card_before_the_next(mig_quota: Any) -> None:
    for i in range(8):
        _submit(mig_quota, f"s{i}", mig_profile="1g.10gb")
    assert services.run_cycle(mig_quota.group_id).placed == 8
    slots = _slots()
    on_card0 = sorted(s[3] or 0 for s in slots.values() if s[1] == 0)
    assert on_card0 == [0, 1, 2, 3, 4, 5, 6]
    assert [s[1] for s in slots.values()].count(1) == 1


def test_release_frees_the_position_for_the_next_instance(mig_quota: Any) -> None:
    whole = _submit(mig_quota, "whole-0", mig_profile="7g.80gb")
    _submit(mig_quota, "whole-1", mig_profile="7g.80gb")
    waiting = _submit(mig_quota, "whole-2", mig_profile="7g.80gb")
    services.run_cycle(mig_quota.group_id)
    waiting.refresh_from_db()
    assert waiting.state == WorkloadState.PENDING
    assert (
        waiting.pending_code == "quota_runtime"
    )  # two cards, two 7g instances: the quota says so first
    freed = _slots()["whole-0"]
    services.release_workload(whole.pk, reason="done")
    assert services.run_cycle(mig_quota.group_id).placed == 1
    assert _slots()["whole-2"] == freed


def test_a_mig_pool_refuses_a_profile_it_does_not_offer_and_a_plain_gpu(mig_quota: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        _submit(mig_quota, "two", mig_profile="2g.20gb")
    assert info.value.fields == {
        "mig_profile": ["This pool offers 1g.10gb, 3g.40gb, 4g.40gb, 7g.80gb."]
    }
    with pytest.raises(InvalidInput) as info:
        _submit(mig_quota, "bad", mig_profile="9g.1tb")
    assert list(info.value.fields) == ["mig_profile"]
    with pytest.raises(InvalidInput) as info:
        _submit(mig_quota, "slice", gpu_count=1, gpu_milli=250)
    assert list(info.value.fields) == ["mig_profile"]
    assert not Workload.objects.exists()


def test_a_slice_pool_refuses_a_mig_profile() -> None:
    group = quota_services.create_group(name="shared").obj
    with pytest.raises(InvalidInput) as info:
        _submit(make_quota(group), "mig", mig_profile="1g.10gb")
    assert info.value.fields == {"mig_profile": ["This pool does not offer MIG instances."]}


def test_packing_keeps_the_4g_position_free_across_cycles(mig_quota: Any) -> None:
    for i in range(3):
        _submit(mig_quota, f"three-{i}", mig_profile="3g.40gb")
    assert services.run_cycle(mig_quota.group_id).placed == 3
    # the third 3g.40gb goes to position 4 of card 1, not 0: 4g.40gb can only start at 0
    assert sorted((s[1], s[3]) for s in _slots().values()) == [(0, 0), (0, 4), (1, 4)]
    _submit(mig_quota, "four", mig_profile="4g.40gb")
    assert services.run_cycle(mig_quota.group_id).placed == 1
    assert _slots()["four"] == ("h100-01", 1, "4g.40gb", 0)


def test_node_page_draws_each_cards_mig_layout_by_position(mig_quota: Any, operator: Any) -> None:
    _submit(mig_quota, "three", mig_profile="3g.40gb")
    _submit(mig_quota, "small", mig_profile="1g.10gb")
    services.run_cycle(mig_quota.group_id)
    client = Client()
    client.force_login(operator)
    node = Node.objects.get(name="h100-01")
    html = client.get(f"/cluster/nodes/{node.pk}/").content.decode()
    slots = _slots()
    three, small = slots["three"][3], slots["small"][3]
    assert f'data-testid="mig-0-{three}"' in html
    assert f"3g.40gb @{three} · three" in html
    assert f"1g.10gb @{small} · small" in html
    assert 'data-testid="mig-legend"' in html
    assert 'data-testid="mig-layout-1"' not in html  # card 1 holds no instance


def test_mig_jobs_of_one_or_more_pods_are_placed_and_mixed_pods_refused(mig_quota: Any) -> None:
    member = {"cpu_milli": 1000, "memory_mib": 1024, "mig_profile": "1g.10gb"}
    common = {"tenant": mig_quota.tenant, "quota": mig_quota, "owner": None, "timeout_seconds": 60}
    plain = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000}
    with pytest.raises(InvalidInput) as info:
        services.submit_gang(name="mixed", members=[member, plain], min_available=2, **common)
    assert list(info.value.fields) == ["members[1].mig_profile"]  # the pool takes MIG pods only
    services.submit_gang(name="solo", members=[member], min_available=1, **common)
    services.submit_gang(name="pair", members=[member, member], min_available=2, **common)
    assert services.run_cycle(mig_quota.group_id).placed == 3
    slots = _slots()
    assert {slots[n][2:] for n in ("solo-0", "pair-0", "pair-1")} == {
        ("1g.10gb", 6),
        ("1g.10gb", 5),
        ("1g.10gb", 4),
    }


def test_a_mig_gang_is_placed_all_together_or_not_at_all(mig_quota: Any) -> None:
    whole = {"cpu_milli": 1000, "memory_mib": 1024, "mig_profile": "7g.80gb"}
    common = {"tenant": mig_quota.tenant, "quota": mig_quota, "owner": None, "timeout_seconds": 600}
    # given one of the two H100 cards holds a 7g instance, and the pool also counts a T4 (no MIG): the
    # quota has room for two more cards, the MIG layout has one
    sync_inventory_rows([gpu_node("t4-01", "T4", 16, gpus=1, pool="isolated")])
    single = _submit(mig_quota, "single", mig_profile="7g.80gb")
    assert services.run_cycle(mig_quota.group_id).placed == 1
    # when a gang of two 7g pods arrives, one card is free: neither pod is placed
    services.submit_gang(name="pair", members=[whole, whole], min_available=2, **common)
    assert services.run_cycle(mig_quota.group_id).placed == 0
    assert set(_slots()) == {"single"}
    waiting = Workload.objects.get(name="pair-0")
    assert waiting.state == WorkloadState.PENDING
    assert "only 1 of the 2 instances it needs together fit now" in waiting.pending_reason
    # then once the single one is released, both cards take the gang together
    services.release_workload(single.pk, reason="done", state=WorkloadState.SUCCEEDED)
    assert services.run_cycle(mig_quota.group_id).placed == 2
    slots = _slots()
    assert sorted(slots) == ["pair-0", "pair-1"]
    assert sorted((card, profile) for _node, card, profile, _start in slots.values()) == [
        (0, "7g.80gb"),
        (1, "7g.80gb"),
    ]


def test_the_fragmentation_map_of_a_mig_pool_counts_instances_of_its_profiles(
    mig_quota: Any,
) -> None:
    group = mig_quota.group
    assert [p.key for p in frag.presets_for(group)] == [
        "mig-1g.10gb",
        "mig-3g.40gb",
        "mig-4g.40gb",
        "mig-7g.80gb",
    ]
    with pytest.raises(InvalidInput) as custom:
        frag.preset(None, 250, 20480, group=group)
    assert list(custom.value.fields) == ["gpu_percent"]
    with pytest.raises(InvalidInput) as slice_key:
        frag.preset("quarter", group=group)
    assert list(slice_key.value.fields) == ["preset"]
    # two empty H100s: 7 more 1g each, and nothing is fragmented
    one_g = frag.preset("mig-1g.10gb", group=group)
    empty = frag.fragmentation_map(group, one_g)
    assert (empty.fits, empty.fragmented_milli) == ({"h100-01": 14}, 0.0)
    # a 1g on each card (two cycles, packing puts the second beside the first otherwise)
    _submit(mig_quota, "a", mig_profile="1g.10gb")
    services.run_cycle(group.pk)
    _submit(mig_quota, "b", mig_profile="7g.80gb")
    services.run_cycle(group.pk)
    taken = frag.fragmentation_map(group, frag.preset("mig-7g.80gb", group=group))
    # card 1 is full (7g), card 0 holds a 1g: no 7g fits anywhere; card 0's 6/7 free are fragmented
    assert taken.fits == {"h100-01": 0}
    assert taken.fragmented_milli == round(6 * 1000 / 7, 1)
    assert frag.fragmentation_map(group, one_g).fits == {"h100-01": 6}


def test_the_fragmentation_page_offers_a_mig_pools_profiles(mig_quota: Any, operator: Any) -> None:
    client = Client()
    client.force_login(operator)
    html = client.get("/dashboards/fragmentation/?pool=isolated").content.decode()
    assert '<option value="mig-1g.10gb"' in html
    assert 'value="quarter"' not in html
    data = client.get("/dashboards/fragmentation/data/?pool=isolated&preset=mig-3g.40gb").json()
    assert (data["summary"]["preset"], data["summary"]["fits_total"]) == ("MIG 3g.40gb", 4)
    refused = client.get("/dashboards/fragmentation/data/?pool=isolated&gpu_percent=30")
    assert refused.status_code == 400
    assert list(refused.json()["error"]["fields"]) == ["gpu_percent"]
