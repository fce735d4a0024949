"""A codespace with a MIG profile on a `mig` pool: create → stop → start → delete on the simulated backend,
the instance's card and position recorded, its GPU-equivalent counted against the quota and released."""

from __future__ import annotations

from typing import Any

import pytest

from codespaces import services
from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace
from codespaces.tests.test_services import run_status_sync
from core.placement.mig import MigInstance, MigLayoutMode
from portal.errors import InvalidInput
from quotas import usage
from quotas.models import QuotaGroup
from scheduling.backends.base import GpuInventory, NodeInventory, ObservedPhase, StatusReport
from scheduling.inventory import sync_inventory_rows
from scheduling.models import Gpu, Node, Placement, PlacementGpu
from scheduling.services import reconcile
from scheduling.services.mig_cards import mig_cards, static_instances

pytestmark = pytest.mark.django_db

MIG_1G = services.SizeRequest(gpu_mode="mig", mig_profile="1g.10gb", gpu_count=0)


@pytest.fixture
def mig_pool(gpu_pool: QuotaGroup) -> QuotaGroup:
    QuotaGroup.objects.filter(pk=gpu_pool.pk).update(
        sharing_mode="mig", mig_profiles=["1g.10gb", "3g.40gb"]
    )
    gpu_pool.refresh_from_db()
    return gpu_pool


def _instances() -> list[tuple[str, int, str, int | None, int]]:
    return [
        (s.gpu.node.name, s.gpu.index, s.mig_profile, s.mig_start, s.gpu_milli)
        for s in PlacementGpu.objects.filter(placement__released_at__isnull=True)
        .select_related("gpu__node")
        .order_by("pk")
    ]


def _gpu_used_milli(quota: Any) -> int:
    """GPU milli the quota's active workloads are charged (quotas.usage)."""
    return sum(
        u.resources.gpu_milli
        for u in usage.live_usage(quota.group_id)
        if u.quota_id == quota.pk and u.active
    )


def test_a_1g_codespace_runs_stops_starts_and_is_deleted(
    mig_pool: Any,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    with capture(execute=True):
        codespace = services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", name="bob-mig", size=MIG_1G
        )
    run_status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.RUNNING
    assert (codespace.gpu_mode, codespace.mig_profile) == ("mig", "1g.10gb")
    assert codespace.size_label == "MIG 1g.10gb (hard isolation) · 2 CPU · 8 GiB RAM"
    # one 1g instance on the first H100 card; it counts 1/7 of a GPU (rounded down) against the quota
    assert _instances() == [("h100-a", 0, "1g.10gb", 6, 142)]
    assert _gpu_used_milli(quota_a) == 142

    with capture(execute=True):
        services.stop_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.STOPPED
    assert _instances() == []
    assert _gpu_used_milli(quota_a) == 0

    with capture(execute=True):
        services.start_codespace(codespace, actor=bob)
    run_status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.RUNNING
    assert _instances() == [("h100-a", 0, "1g.10gb", 6, 142)]
    assert _gpu_used_milli(quota_a) == 142

    with capture(execute=True):
        services.delete_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.DELETED
    assert _instances() == []
    assert _gpu_used_milli(quota_a) == 0


def test_a_mig_size_names_a_profile_of_the_pool(
    mig_pool: Any, bob: Any, team_a: Any, quota_a: Any, template: Any
) -> None:
    two = services.SizeRequest(gpu_mode="mig", mig_profile="2g.20gb")
    with pytest.raises(InvalidInput) as info:
        services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", name="bob-mig", size=two
        )
    assert info.value.fields == {"mig_profile": ["Pool gpu: This pool offers 1g.10gb, 3g.40gb."]}
    bad = services.SizeRequest(gpu_mode="mig", mig_profile="x" * 200)
    with pytest.raises(InvalidInput) as info:
        services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", name="bob-mig", size=bad
        )
    assert list(info.value.fields) == ["mig_profile"]
    assert not Codespace.objects.exists()


def test_a_slice_pool_refuses_a_mig_size(
    bob: Any, team_a: Any, quota_a: Any, template: Any
) -> None:
    with pytest.raises(InvalidInput) as info:
        services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", name="bob-mig", size=MIG_1G
        )
    assert info.value.fields == {
        "mig_profile": ["Pool gpu: This pool does not offer MIG instances."]
    }


def test_the_picker_offers_the_pools_mig_profiles_with_where_they_start(
    mig_pool: Any, quota_a: Any, template: Any
) -> None:
    options = services.picker_data(template, quota_a).mig_options
    assert [(o.profile, o.starts_now, o.node) for o in options] == [
        ("1g.10gb", True, "h100-a"),
        ("3g.40gb", True, "h100-a"),
    ]
    assert options[0].sentence == "1g.10gb: hard isolation, starts now on h100-a"


def test_the_picker_offers_no_mig_profile_in_a_slice_pool(quota_a: Any, template: Any) -> None:
    assert services.picker_data(template, quota_a).mig_options == []


def test_the_backend_is_told_the_instance_and_the_allocated_device_is_recorded(
    mig_pool: Any,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    with capture(execute=True):
        codespace = services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", name="bob-mig", size=MIG_1G
        )
    codespace.refresh_from_db()
    placement = Placement.objects.get(workload_id=codespace.workload_id, released_at__isnull=True)
    # what a backend gets: the card, and the MIG instance on it (a dra claim pins both)
    (gpu,) = reconcile.materialize_request(placement.workload, placement).gpus
    assert (gpu.index, gpu.gpu_milli, gpu.mig_profile, gpu.mig_start) == (0, 142, "1g.10gb", 6)

    # when the cluster reports the device it allocated, the placement's share records it
    device = "gpu.nvidia.com/h100-a/gpu-0-mig-1g-10gb-6"
    report = StatusReport(
        codespace.workload_id, ObservedPhase.PENDING, allocated_devices=((0, device),)
    )
    reconcile.apply_status_reports([report])
    reconcile.apply_status_reports([report])  # the same report again changes nothing
    assert list(
        PlacementGpu.objects.filter(placement=placement).values_list("allocated_device", flat=True)
    ) == [device]
    assert reconcile.record_allocations([report]) == 0


def test_a_static_layout_from_inventory_is_honoured_by_the_cycle(
    mig_pool: Any,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given inventory reports the operator's static layouts on h100-a (as the mixed strategy does)
    node = Node.objects.get(name="h100-a")
    uuids = dict(node.gpus.values_list("index", "uuid"))
    layouts = [(("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5)), (("7g.80gb", 0),)]
    sync_inventory_rows(
        [
            NodeInventory(
                name="h100-a",
                cpu_milli=node.cpu_milli,
                memory_mib=node.memory_mib,
                gpu_model=node.gpu_model,
                labels=tuple(node.labels.items()),
                gpus=tuple(
                    GpuInventory(i, uuids[i], "H100", 80 * 1024, mig_layout=layout)
                    for i, layout in enumerate(layouts)
                ),
            )
        ]
    )
    assert [g.mig_layout for g in Gpu.objects.filter(node=node).order_by("index")] == [
        [["3g.40gb", 0], ["1g.10gb", 4], ["1g.10gb", 5]],
        [["7g.80gb", 0]],
    ]
    cards = mig_cards(mig_pool, ["h100-a"])
    assert [(c.mode, [(i.profile, i.start) for i in c.instances]) for c in cards] == [
        (MigLayoutMode.STATIC, [("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5)]),
        (MigLayoutMode.STATIC, [("7g.80gb", 0)]),
    ]
    # when bob asks for a 1g.10gb: he gets the layout's first free 1g instance (a dynamic card would
    # have created one at position 6), and the next reading shows it in use
    capture = django_capture_on_commit_callbacks
    with capture(execute=True):
        services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", name="bob-mig", size=MIG_1G
        )
    assert _instances() == [("h100-a", 0, "1g.10gb", 4, 142)]
    (card0, _card1) = mig_cards(mig_pool, ["h100-a"])
    assert [(i.start, i.in_use) for i in card0.instances] == [(0, False), (4, True), (5, False)]


def test_a_malformed_stored_layout_entry_is_skipped() -> None:
    held = [MigInstance("1g.10gb", 4, in_use=True)]
    layout = [["1g.10gb", 4], "junk", ["1g.10gb"], [3, 1], ["1g.10gb", 5]]
    assert static_instances(layout, held) == (
        MigInstance("1g.10gb", 4, in_use=True),
        MigInstance("1g.10gb", 5, in_use=False),
    )
    assert static_instances({"not": "a list"}, held) == ()


def _mig_preset(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "mig-1g",
        "label": "MIG 1g.10gb",
        "gpu_mode": "mig",
        "mig_profile": "1g.10gb",
        "cpu_milli": 2000,
        "memory_mib": 8192,
        **overrides,
    }


def test_a_template_preset_names_a_mig_profile_and_codespaces_start_from_it(
    mig_pool: Any,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    presets = [
        {**p, "position": i}
        for i, p in enumerate(
            template.presets.values(
                "name",
                "label",
                "gpu_mode",
                "gpu_count",
                "gpu_percent",
                "gpu_memory_gib",
                "gpu_model",
                "mig_profile",
                "cpu_milli",
                "memory_mib",
            )
        )
    ]
    services.update_template(
        template, expected_version=template.version, presets=[*presets, _mig_preset()]
    )
    # the picker offers it on the MIG pool, with where it starts
    option = next(
        o for o in services.picker_data(template, quota_a).options if o.preset.name == "mig-1g"
    )
    assert (option.starts_now, option.node) == (True, "h100-a")
    with django_capture_on_commit_callbacks(execute=True):
        codespace = services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", preset="mig-1g", name="bob-mig"
        )
    codespace.refresh_from_db()
    assert (codespace.gpu_mode, codespace.mig_profile) == ("mig", "1g.10gb")
    assert _instances() == [("h100-a", 0, "1g.10gb", 6, 142)]


def test_a_mig_preset_is_refused_in_a_slice_pool_and_a_bad_profile_is_a_preset_error(
    quota_a: Any, template: Any
) -> None:
    with pytest.raises(InvalidInput) as bad:
        services.create_template(
            name="mig-only", display_name="MIG", presets=[_mig_preset(mig_profile="9g.1tb" * 10)]
        )
    long_name = "9g.1tb" * 10
    assert bad.value.fields["presets"] == [
        f"Preset 1: a MIG preset names a profile such as 1g.10gb (got {long_name[:40]!r})."
    ]
    with pytest.raises(InvalidInput) as mixed:
        services.create_template(
            name="mixed",
            display_name="Mixed",
            presets=[_mig_preset(gpu_mode="slice", gpu_percent=25, gpu_memory_gib=10)],
        )
    assert mixed.value.fields["presets"] == ["Preset 1: only a MIG preset names a MIG profile."]
    services.update_template(template, expected_version=template.version, presets=[_mig_preset()])
    # the gpu pool shares by slices: the preset is listed as refused, with the pool's reason
    (option,) = services.picker_data(template, quota_a).options
    assert not option.starts_now
    assert option.refused == "mig_profile: Pool gpu: This pool does not offer MIG instances."


def test_a_1g_codespace_on_a_dynamic_card_waits_for_the_reconfiguration_then_runs(
    mig_pool: Any,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from scheduling.models import MigReconfiguration
    from scheduling.services.mig_reconfig import drive_reconfigurations

    capture = django_capture_on_commit_callbacks
    settings.TESSERA_SIM_MIG_RECONFIGURE_SECONDS = 3600
    Gpu.objects.update(mig_dynamic=True)
    with capture(execute=True):
        codespace = services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", name="bob-mig", size=MIG_1G
        )
    run_status_sync(capture)
    codespace.refresh_from_db()
    # placed on a new instance of an empty card: it waits for the card's reconfiguration, saying so
    assert codespace.state == S.STARTING
    assert codespace.waiting_reason == (
        "Waiting for the card's MIG reconfiguration (h100-a GPU 0: empty → 1g.10gb@6)"
    )
    with capture(execute=True):
        drive_reconfigurations()
    run_status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.STARTING
    settings.TESSERA_SIM_MIG_RECONFIGURE_SECONDS = 0
    with capture(execute=True):
        assert drive_reconfigurations().ready == [MigReconfiguration.objects.get().pk]
    run_status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.RUNNING
    assert codespace.waiting_reason == ""
    assert Gpu.objects.get(node__name="h100-a", index=0).mig_layout == [["1g.10gb", 6]]
    assert _instances() == [("h100-a", 0, "1g.10gb", 6, 142)]
