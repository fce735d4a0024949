"""MIG on Kubernetes as data: device-plugin resources and GFD labels (static), ResourceSlices in and
ResourceClaims out (DRA), every generated object validated against the 1.34 and 1.35 schemas."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from core.placement.mig import MigInstance, MigPlacement, MigRequest, plan_mig
from scheduling.backends.kubernetes.mig import (
    claim_allocation,
    device_class_quota_milli,
    mig_cards_from_slices,
    mig_devices,
    mig_resource_claim,
    mig_resource_name,
    static_mig_counts,
    static_mig_limits,
    static_mig_node_selector,
)
from tests.kubernetes import dra

DRA_VERSIONS = ["1.34", "1.35"]
H100 = "NVIDIA-H100-80GB-HBM3"
MIG_CLASS = "mig.gpu.tessera.test"


def test_static_mig_asks_the_device_plugin_for_one_instance_on_a_mixed_strategy_node() -> None:
    assert mig_resource_name("1g.10gb") == "nvidia.com/mig-1g.10gb"
    assert static_mig_limits("3g.40gb") == {"nvidia.com/mig-3g.40gb": "1"}
    assert static_mig_node_selector(H100) == {
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/gpu.product": H100,
    }
    with pytest.raises(ValueError, match="not a MIG profile"):
        mig_resource_name("1g.10gb; rm")


def test_static_mig_inventory_reads_allocatable_then_gfd_counts() -> None:
    labels = {
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig-1g.10gb.count": "4",
        "nvidia.com/mig-3g.40gb.count": "1",
    }
    allocatable = {"cpu": "64", "nvidia.com/mig-1g.10gb": "3", "nvidia.com/mig-3g.40gb": "1"}
    assert static_mig_counts(labels, allocatable) == {"1g.10gb": 3, "3g.40gb": 1}
    assert static_mig_counts(labels, {"cpu": "64"}) == {"1g.10gb": 4, "3g.40gb": 1}
    assert static_mig_counts({"nvidia.com/mig.strategy": "single"}, allocatable) == {}


def test_slices_become_dynamic_cards_with_their_allocated_instances_and_taints() -> None:
    published = dra.mig_resource_slice("h100-03", [("GPU-a", H100), ("GPU-b", H100)], tainted=[1])
    devices = mig_devices([published])
    assert len(devices) == 2 * 18  # 7 + 4 + 3 + 2 + 1 + 1 placements per H100
    cards = mig_cards_from_slices([published], allocated=[("h100-03", "gpu-0-mig-3g-40gb-4")])
    assert [(c.node, c.gpu_index, c.model, c.healthy) for c in cards] == [
        ("h100-03", 0, H100, True),
        ("h100-03", 1, H100, False),
    ]
    assert cards[0].instances == (MigInstance("3g.40gb", 4, in_use=True),)
    assert cards[1].instances == ()


def _matches(device: dict[str, Any], driver: str, expression: str) -> bool:
    """Evaluate the claim's selector (a conjunction of attribute equalities and capacity memberships,
    ``"memorySlice6" in device.capacity["<driver>"]``) against one published device."""
    attrs = device["attributes"]
    for clause in expression.split(" && "):
        if " in " in clause:
            key, domain = clause.split(" in ")
            assert domain == f'device.capacity["{driver}"]', clause
            if key.strip('"') not in (device.get("capacity") or {}):
                return False
            continue
        left, right = clause.split(" == ")
        name = left.removeprefix(f'device.attributes["{driver}"].')
        value = next(iter(attrs[name].values()))
        if str(value) != right.strip('"'):
            return False
    return True


@pytest.mark.parametrize("version", DRA_VERSIONS)
def test_engine_choice_becomes_a_claim_pinned_to_one_published_device(version: str) -> None:
    published = dra.mig_resource_slice("h100-03", [("GPU-a", H100)])
    cards = mig_cards_from_slices([published], allocated=[("h100-03", "gpu-0-mig-4g-40gb-0")])
    plan = plan_mig(cards, [MigRequest("cs-1", "1g.10gb")])
    (placement,) = plan.placements
    assert (placement.node, placement.profile, placement.start) == ("h100-03", "1g.10gb", 6)
    claim = mig_resource_claim(
        "cs-1-mig",
        placement,
        parent_uuid="GPU-a",
        driver=dra.DRIVER,
        device_class=MIG_CLASS,
        namespace="tessera-workloads",
    )
    kubernetes_validate.validate(claim, version, strict=True)
    kubernetes_validate.validate(published, version, strict=True)
    kubernetes_validate.validate(dra.device_class(MIG_CLASS), version, strict=True)
    expression = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"][
        "expression"
    ]
    chosen = [
        d["name"] for d in published["spec"]["devices"] if _matches(d, dra.DRIVER, expression)
    ]
    assert chosen == ["gpu-0-mig-1g-10gb-6"]


def test_claim_refuses_a_placement_that_is_not_mig() -> None:
    with pytest.raises(ValueError, match="not a MIG placement"):
        mig_resource_claim(
            "x",
            MigPlacement("r", "n", 0, "1g.10gb", 9, True),
            parent_uuid="GPU-a",
            driver=dra.DRIVER,
            device_class=MIG_CLASS,
        )


def test_allocation_and_device_status_are_read_back() -> None:
    claim = dra.resource_claim("cs-1-mig", dra.gpu_request(MIG_CLASS))
    assert claim_allocation(claim) is None
    claim.update(dra.allocation("h100-03", "gpu-0-mig-1g-10gb-6"))
    claim["status"]["devices"] = [
        {
            "driver": dra.DRIVER,
            "pool": "h100-03",
            "device": "gpu-0-mig-1g-10gb-6",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Created",
                    "message": "",
                    "lastTransitionTime": "2026-12-02T05:00:00Z",
                }
            ],
        }
    ]
    for version in DRA_VERSIONS:
        kubernetes_validate.validate(claim, version, strict=True)
    allocation = claim_allocation(claim)
    assert allocation is not None
    assert (allocation.pool, allocation.device, allocation.conditions) == (
        "h100-03",
        "gpu-0-mig-1g-10gb-6",
        (("Ready", "True"),),
    )


def test_device_classes_map_to_quota_units() -> None:
    classes = {"gpu.tessera.test": "gpu", MIG_CLASS: "mig"}
    assert device_class_quota_milli("gpu.tessera.test", classes) == 1000
    assert device_class_quota_milli(MIG_CLASS, classes, "3g.40gb") == 428
    assert device_class_quota_milli("fpga.example.com", classes) is None


def test_nvidias_driver_names_give_the_start_and_the_card_index_it_publishes_no_attribute_for() -> (
    None
):
    # kubernetes-sigs/dra-driver-nvidia-gpu: MIG device "gpu-<minor>-mig-<profile>-<GI profile id>-<start>",
    # attributes type/parentUUID/profile/productName only; a card "gpu-<minor>" with uuid/productName
    from scheduling.backends.kubernetes.dra import slice_gpus
    from scheduling.backends.kubernetes.mig import mig_devices

    mig = {
        "name": "gpu-1-mig-3g40gb-9-4",
        "attributes": {
            "type": {"string": "mig"},
            "parentUUID": {"string": "GPU-b"},
            "profile": {"string": "3g.40gb"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
        },
        "capacity": {f"memorySlice{i}": {"value": "1"} for i in range(4, 8)},
    }
    card = {
        "name": "gpu-1",
        "attributes": {
            "uuid": {"string": "GPU-b"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }
    published = {
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "h100-03", "devices": [card, mig]}
    }
    (device,) = mig_devices([published])
    assert (device.card_index, device.profile, device.start) == (1, "3g.40gb", 4)
    # a name without the start: the memory slices it spans say where it starts
    unnamed = {**mig, "name": "x"}
    (device,) = mig_devices([{"spec": {**published["spec"], "devices": [unnamed]}}])
    assert device.start == 4
    assert [(g.index, g.uuid) for g in slice_gpus([published], "gpu.nvidia.com")["h100-03"]] == [
        (1, "GPU-b")
    ]


def test_a_mig_claim_pins_the_start_by_the_memory_slice_capacity_the_driver_publishes() -> None:
    from scheduling.backends.kubernetes.mig import mig_selector

    assert mig_selector("gpu.nvidia.com", "GPU-a", "1g.10gb", 6) == (
        'device.attributes["gpu.nvidia.com"].type == "mig" && '
        'device.attributes["gpu.nvidia.com"].parentUUID == "GPU-a" && '
        'device.attributes["gpu.nvidia.com"].profile == "1g.10gb" && '
        '"memorySlice6" in device.capacity["gpu.nvidia.com"]'
    )
