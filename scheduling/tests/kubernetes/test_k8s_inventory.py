"""Inventory: nodes, labels, taints, cordon; GPUs from HAMi (JSON + colon), Koordinator, GFD."""

from __future__ import annotations

from k8s_builders import GPU_A, GPU_B, config, hami_register_json

from scheduling.backends.base import GpuInventory, NodeInventory
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.constants import Mode
from scheduling.backends.kubernetes.fake import FakeCluster
from scheduling.backends.kubernetes.inventory import node_to_inventory, normalize_model

GFD = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "2"}


def koord_device(node: str) -> dict:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Device",
        "metadata": {
            "name": node,
            "labels": {"node.koordinator.sh/gpu-model": "NVIDIA A100-SXM4-80GB"},
        },
        "spec": {
            "devices": [
                {
                    "type": "gpu",
                    "id": GPU_A,
                    "minor": 1,
                    "health": True,
                    "resources": {
                        "koordinator.sh/gpu-core": "100",
                        "koordinator.sh/gpu-memory": "80Gi",
                        "koordinator.sh/gpu-memory-ratio": "100",
                    },
                    "topology": {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:3a"},
                    "conditions": [{"type": "Healthy", "status": "True"}],
                },
                {
                    "type": "gpu",
                    "id": GPU_B,
                    "minor": 0,
                    "health": True,
                    "resources": {"koordinator.sh/gpu-memory": "80Gi"},
                    "conditions": [{"type": "Healthy", "status": "False"}],
                },
                {"type": "rdma", "id": "0000:09:00.0", "minor": 0, "health": True},
            ]
        },
    }


def test_hami_json_node_with_taint_and_cordon():
    cluster = FakeCluster()
    cluster.add_node(
        "gpu-node-3",
        labels=GFD,
        annotations={"hami.io/node-nvidia-register": hami_register_json(GPU_A, GPU_B)},
        allocatable={"cpu": "63500m", "memory": "512Gi", "nvidia.com/gpu": "20"},
        taints=[
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "maintenance", "effect": "NoExecute"},
        ],
        unschedulable=True,
    )
    backend = KubernetesBackend(cluster, config())

    (node,) = backend.sync_inventory()

    model = "NVIDIA-A100-SXM4-80GB"
    assert node == NodeInventory(
        name="gpu-node-3",
        cpu_milli=63500,
        memory_mib=524288,
        gpu_model=model,
        labels=(
            ("kubernetes.io/hostname", "gpu-node-3"),
            ("nvidia.com/gpu.count", "2"),
            ("nvidia.com/gpu.product", model),
        ),
        taints=("nvidia.com/gpu=present:NoSchedule", "maintenance:NoExecute"),
        cordoned=True,
        gpus=(
            GpuInventory(index=0, uuid=GPU_A, model=model, memory_mib=81920, numa_node=0),
            GpuInventory(index=1, uuid=GPU_B, model=model, memory_mib=81920, numa_node=1),
        ),
    )


def test_hami_colon_format_and_device_cordon_mark_gpus_unhealthy():
    colon = f"{GPU_A},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,0,hami-core:" + (
        f"{GPU_B},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,1,false,1,hami-core:"
    )
    node = {
        "metadata": {
            "name": "old-hami",
            "annotations": {
                "hami.io/node-nvidia-register": colon,
                "hami.io/device-cordon": GPU_A,
            },
        },
        "status": {
            "allocatable": {"cpu": "8", "memory": "64Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }

    inventory = node_to_inventory(node, None, prefer_koordinator=False)

    assert [(g.uuid, g.index, g.numa_node, g.healthy) for g in inventory.gpus] == [
        (GPU_A, 0, 0, False),  # cordoned by the operator
        (GPU_B, 1, 1, False),  # unhealthy per HAMi
    ]
    assert inventory.gpu_model == "NVIDIA-Tesla-V100-PCIE-32GB"


def test_not_ready_node_reports_every_gpu_unhealthy():
    cluster = FakeCluster()
    cluster.add_node(
        "n1",
        annotations={"hami.io/node-nvidia-register": hami_register_json(GPU_A)},
        ready=False,
    )

    (node,) = KubernetesBackend(cluster, config()).sync_inventory()

    assert [g.healthy for g in node.gpus] == [False]


def test_koordinator_device_objects_in_koordinator_mode():
    cluster = FakeCluster()
    cluster.add_node("gpu-node-3", labels={"koordinator.sh/gpu-isolation-provider": "HAMi-core"})
    cluster.add_device(koord_device("gpu-node-3"))

    (node,) = KubernetesBackend(cluster, config(Mode.KOORDINATOR)).sync_inventory()

    model = "NVIDIA-A100-SXM4-80GB"
    assert node.gpu_model == model
    assert node.gpus == (
        GpuInventory(index=0, uuid=GPU_B, model=model, memory_mib=81920, healthy=False),
        GpuInventory(index=1, uuid=GPU_A, model=model, memory_mib=81920, numa_node=1),
    )
    assert "list_koordinator_devices" in cluster.calls


def test_hami_modes_do_not_query_koordinator_devices():
    cluster = FakeCluster()
    cluster.add_node("n1", labels={**GFD, "nvidia.com/gpu.memory": "81920"})

    (node,) = KubernetesBackend(cluster, config(Mode.HAMI_DELEGATE)).sync_inventory()

    assert "list_koordinator_devices" not in cluster.calls
    assert [(g.uuid, g.memory_mib) for g in node.gpus] == [("gfd:n1:0", 81920), ("gfd:n1:1", 81920)]


def test_malformed_hami_annotation_falls_back_to_gfd_labels():
    cluster = FakeCluster()
    cluster.add_node(
        "n1",
        labels={**GFD, "nvidia.com/gpu.memory": "81920"},
        annotations={"hami.io/node-nvidia-register": "GPU-a,10:"},
    )

    (node,) = KubernetesBackend(cluster, config()).sync_inventory()

    assert [g.uuid for g in node.gpus] == ["gfd:n1:0", "gfd:n1:1"]


def test_cpu_only_node_has_no_gpus_and_nodes_are_sorted():
    cluster = FakeCluster()
    cluster.add_node("b-cpu")
    cluster.add_node("a-cpu")

    nodes = KubernetesBackend(cluster, config()).sync_inventory()

    assert [(n.name, n.gpus, n.gpu_model) for n in nodes] == [("a-cpu", (), ""), ("b-cpu", (), "")]


def test_normalize_model_spellings():
    assert normalize_model("NVIDIA-NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert normalize_model("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert normalize_model("NVIDIA-A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
