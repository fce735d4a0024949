"""Static MIG layouts read from inventory: the device plugin's mixed-strategy counts become per-card
layouts, a driver's non-overlapping MIG devices are a static card, and the cycle's cards honour them."""

from __future__ import annotations

import kubernetes_validate
import pytest
from k8s_builders import GPU_A, NOW, codespace, config

from scheduling.backends.base import GpuBinding
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.dra import slice_gpus
from scheduling.backends.kubernetes.fake import FakeCluster
from scheduling.backends.kubernetes.inventory import nodes_to_inventory
from scheduling.backends.kubernetes.manifests import build_objects, intended_node
from scheduling.backends.kubernetes.mig import mig_devices, static_layout_of, static_layouts
from tests.kubernetes import dra

H100 = "NVIDIA-H100-80GB-HBM3"


def test_node_counts_are_laid_out_largest_profile_first_on_the_first_card_with_room() -> None:
    counts = {"1g.10gb": 4, "3g.40gb": 2, "7g.80gb": 1}
    layouts = static_layouts(counts, [(H100, 81920), (H100, 81920), ("Tesla-T4", 15360)])
    assert layouts == [
        (("7g.80gb", 0),),
        (("3g.40gb", 0), ("3g.40gb", 4)),
        (),  # no MIG on a T4
    ]
    # the 1g instances did not fit anywhere: counts the cards cannot hold are left out
    layouts = static_layouts({"1g.10gb": 3, "3g.40gb": 1}, [("H100", 81920)])
    assert layouts == [(("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6))]


def test_a_mixed_strategy_node_reports_static_layouts_on_its_cards() -> None:
    fake = FakeCluster()
    fake.add_node(
        "h100-m",
        labels={
            "nvidia.com/mig.strategy": "mixed",
            c.GFD_PRODUCT: H100,
            c.GFD_COUNT: "1",
            c.GFD_MEMORY: "81559",
        },
        allocatable={
            "cpu": "32",
            "memory": "256Gi",
            "nvidia.com/mig-1g.10gb": "2",
            "nvidia.com/mig-3g.40gb": "1",
        },
    )
    fake.add_node("plain", labels={c.GFD_PRODUCT: H100, c.GFD_COUNT: "1", c.GFD_MEMORY: "81559"})

    inventory = {
        n.name: n for n in nodes_to_inventory(fake.list_nodes(), [], prefer_koordinator=False)
    }

    assert [g.mig_layout for g in inventory["h100-m"].gpus] == [
        (("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5))
    ]
    assert [g.mig_layout for g in inventory["plain"].gpus] == [()]


def test_non_overlapping_published_instances_are_a_static_card_all_placements_a_dynamic_one() -> (
    None
):
    dynamic = dra.mig_resource_slice("n1", [("GPU-d", H100)], driver="gpu.nvidia.com")
    static = dra.mig_resource_slice("n2", [("GPU-s", H100)], driver="gpu.nvidia.com")
    keep = {"gpu-0-mig-3g-40gb-4", "gpu-0-mig-1g-10gb-0", "gpu-0-mig-1g-10gb-1"}
    static["metadata"]["name"] = "n2-static"
    static["spec"]["devices"] = [d for d in static["spec"]["devices"] if d["name"] in keep]

    assert static_layout_of(mig_devices([dynamic])) == ()
    assert static_layout_of(mig_devices([static])) == (
        ("1g.10gb", 0),
        ("1g.10gb", 1),
        ("3g.40gb", 4),
    )
    gpus = slice_gpus([dynamic, static], "gpu.nvidia.com")
    assert [g.mig_layout for g in gpus["n1"]] == [()]
    assert [g.mig_layout for g in gpus["n2"]] == [(("1g.10gb", 0), ("1g.10gb", 1), ("3g.40gb", 4))]


def test_overlapping_or_invalid_positions_are_not_a_static_layout() -> None:
    devices = mig_devices([dra.mig_resource_slice("n", [("GPU-x", H100)])])
    two_g_at_1 = [d for d in devices if (d.profile, d.start) in {("1g.10gb", 1), ("2g.20gb", 0)}]
    assert static_layout_of(two_g_at_1) == ()  # 2g at 0 spans slice 1 too
    assert static_layout_of([]) == ()


@pytest.mark.parametrize("mode", c.DEVICE_PLUGIN_MODES)
def test_a_mig_placement_outside_dra_asks_the_device_plugin_for_one_instance(mode: c.Mode) -> None:
    mig = GpuBinding(0, GPU_A, 142, 10240, mig_profile="1g.10gb", mig_start=6)
    request = codespace(node_name="h100-m", gpus=(mig,))
    pod = build_objects(request, config(mode), now=NOW).pod

    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"] == {
        "cpu": "4000m",
        "memory": "16384Mi",
        "nvidia.com/mig-1g.10gb": "1",
    }
    assert "schedulerName" not in pod["spec"]  # the default scheduler, pinned to the planned node
    assert intended_node(pod) == "h100-m"
    assert not [
        k for k in pod["metadata"]["annotations"] if k.startswith(("hami.io", "nvidia.com"))
    ]
    kubernetes_validate.validate(pod, "1.33", strict=True)
    # hami-bind does not bind it itself: the default scheduler does
    fake = FakeCluster()
    KubernetesBackend(fake, config(mode), clock=lambda: NOW).materialize(request)
    assert "bind_pod" not in fake.calls
