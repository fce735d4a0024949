"""The `dra` mode of the KubernetesBackend on the in-memory cluster: each placement made real as a pinned
ResourceClaim that its pod consumes, the allocation read back, claims released with their pods, the GPU
inventory read from ResourceSlices (device taints honoured), and DeviceClass -> quota unit mapping."""

from __future__ import annotations

import dataclasses

import kubernetes_validate
import pytest
from k8s_builders import GPU_A, GPU_B, NAMESPACE, NOW, codespace, config, gang_pod

from scheduling.backends.base import GpuBinding, ObservedPhase
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.backend import KubernetesBackend, config_from_settings
from scheduling.backends.kubernetes.config import KubeConfig, parse_device_classes
from scheduling.backends.kubernetes.dra import DraClaimError, claim_name
from scheduling.backends.kubernetes.fake import FakeCluster
from scheduling.backends.kubernetes.interface import ClusterApiError, Kind
from scheduling.backends.kubernetes.manifests import build_objects
from tests.kubernetes import dra

H100 = "NVIDIA-H100-80GB-HBM3"
DRIVER = "gpu.nvidia.com"
MIG_1G = GpuBinding(
    index=0, uuid=GPU_A, gpu_milli=142, gpu_memory_mib=10240, mig_profile="1g.10gb", mig_start=6
)


def mig_codespace(**overrides: object) -> object:
    base = codespace(node_name="h100-03", gpus=(MIG_1G,), gpu_model=H100, placement_id=31)
    return dataclasses.replace(base, **overrides)


def whole_cards_pod() -> object:
    return gang_pod(
        0,
        gpus=(
            GpuBinding(index=0, uuid=GPU_A, gpu_milli=1000, gpu_memory_mib=81920),
            GpuBinding(index=1, uuid=GPU_B, gpu_milli=1000, gpu_memory_mib=81920),
        ),
        placement_id=40,
    )


@pytest.fixture
def cluster() -> FakeCluster:
    fake = FakeCluster()
    fake.add_node("h100-03")
    fake.add_node("gpu-node-0")
    return fake


@pytest.fixture
def backend(cluster: FakeCluster) -> KubernetesBackend:
    return KubernetesBackend(cluster, config(c.Mode.DRA), clock=lambda: NOW)


def test_a_mig_placement_becomes_a_claim_pinning_card_profile_and_start(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    backend.materialize(mig_codespace())

    claim = cluster.get_resource_claim(NAMESPACE, "cs-alice-7f3k-gpu")
    assert claim is not None
    (request,) = claim["spec"]["devices"]["requests"]
    assert request == {
        "name": "gpu-0",
        "exactly": {
            "deviceClassName": "mig.nvidia.com",
            "allocationMode": "ExactCount",
            "count": 1,
            "selectors": [
                {
                    "cel": {
                        "expression": 'device.attributes["gpu.nvidia.com"].type == "mig" && '
                        f'device.attributes["gpu.nvidia.com"].parentUUID == "{GPU_A}" && '
                        'device.attributes["gpu.nvidia.com"].profile == "1g.10gb" && '
                        '"memorySlice6" in device.capacity["gpu.nvidia.com"]'
                    }
                }
            ],
        },
    }
    assert claim["metadata"]["labels"][c.PLACEMENT_ID_LABEL] == "31"
    pod = cluster.get(Kind.POD, NAMESPACE, "cs-alice-7f3k")
    assert pod is not None
    spec = pod["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "cs-alice-7f3k-gpu"}]
    container = spec["containers"][0]
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    # no device-plugin resources, no HAMi or Koordinator scheduler: the default scheduler allocates
    assert not any(key.startswith("nvidia.com/") for key in container["resources"]["limits"])
    assert "schedulerName" not in spec
    # the home, then the claim, then the pod that consumes it, then the Service
    assert cluster.calls[:4] == ["create", "create_resource_claim", "create", "create"]


def test_whole_cards_are_pinned_by_uuid_one_request_per_card(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    backend.materialize(whole_cards_pod())

    claim = cluster.get_resource_claim(NAMESPACE, claim_name("job-train-12-pod-0"))
    assert claim is not None
    requests = claim["spec"]["devices"]["requests"]
    assert [(r["name"], r["exactly"]["deviceClassName"]) for r in requests] == [
        ("gpu-0", "gpu.nvidia.com"),
        ("gpu-1", "gpu.nvidia.com"),
    ]
    assert [r["exactly"]["selectors"][0]["cel"]["expression"] for r in requests] == [
        f'device.attributes["gpu.nvidia.com"].uuid == "{GPU_A}"',
        f'device.attributes["gpu.nvidia.com"].uuid == "{GPU_B}"',
    ]


def test_a_fractional_share_is_refused_permanently_and_nothing_is_created(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    with pytest.raises(DraClaimError, match="300m share") as refused:
        backend.materialize(codespace())  # 30 % of a card: a HAMi slice has no DRA device
    assert refused.value.permanent
    assert cluster.objects(Kind.POD, NAMESPACE) == []
    assert cluster.list_resource_claims(NAMESPACE, c.MANAGED_SELECTOR) == []


def test_a_unit_without_a_device_class_or_a_class_counting_otherwise_is_refused(
    cluster: FakeCluster,
) -> None:
    only_gpus = KubernetesBackend(
        cluster, config(c.Mode.DRA, dra_device_classes=(("gpu.nvidia.com", "gpu"),))
    )
    with pytest.raises(DraClaimError, match="no DeviceClass is mapped to 'mig'"):
        only_gpus.materialize(mig_codespace())
    # a 3g placement charged as 1g: the class counts 428m, the placement holds 142m
    wrong = dataclasses.replace(MIG_1G, mig_profile="3g.40gb", mig_start=4)
    with pytest.raises(DraClaimError, match="counts 428m, the placement holds 142m"):
        KubernetesBackend(cluster, config(c.Mode.DRA)).materialize(mig_codespace(gpus=(wrong,)))
    assert cluster.list_resource_claims(NAMESPACE, c.MANAGED_SELECTOR) == []


def test_the_allocation_is_read_back_per_gpu_index(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    backend.materialize(mig_codespace())
    (before,) = backend.sync_status([7])
    assert (before.phase, before.allocated_devices) == (ObservedPhase.PENDING, ())

    cluster.allocate_claim(
        NAMESPACE,
        "cs-alice-7f3k-gpu",
        [("gpu-0", DRIVER, "h100-03", "gpu-0-mig-1g-10gb-6"), ("other", DRIVER, "x", "y")],
    )
    (after,) = backend.sync_status([7])
    assert after.allocated_devices == ((0, "gpu.nvidia.com/h100-03/gpu-0-mig-1g-10gb-6"),)
    assert cluster.calls.count("list_resource_claims") == 2  # one list per sync, not one get each


def test_release_deletes_the_claim_with_the_pod_but_keeps_a_later_placements(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    backend.materialize(mig_codespace())
    backend.release(7, "cs-alice-7f3k", delete_home=False, placement_id=30)  # an older placement
    assert cluster.get_resource_claim(NAMESPACE, "cs-alice-7f3k-gpu") is not None
    assert cluster.get(Kind.POD, NAMESPACE, "cs-alice-7f3k") is not None

    backend.release(7, "cs-alice-7f3k", delete_home=False, placement_id=31)
    assert cluster.get_resource_claim(NAMESPACE, "cs-alice-7f3k-gpu") is None
    assert cluster.get(Kind.POD, NAMESPACE, "cs-alice-7f3k") is None
    backend.release(7, "cs-alice-7f3k", delete_home=False, placement_id=31)  # idempotent


def test_a_claim_left_by_an_earlier_placement_is_replaced_on_retry(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    backend.materialize(mig_codespace(placement_id=30))
    cluster.delete(Kind.POD, NAMESPACE, "cs-alice-7f3k")  # the pod went, its claim stayed

    with pytest.raises(ClusterApiError, match="made for placement 30") as stale:
        backend.materialize(mig_codespace(placement_id=31))
    assert not stale.value.permanent
    backend.materialize(mig_codespace(placement_id=31))
    claim = cluster.get_resource_claim(NAMESPACE, "cs-alice-7f3k-gpu")
    assert claim is not None
    assert claim["metadata"]["labels"][c.PLACEMENT_ID_LABEL] == "31"


def test_a_claim_of_another_workload_is_a_permanent_error(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    backend.materialize(mig_codespace(workload_id=8))
    with pytest.raises(ClusterApiError, match="another workload") as taken:
        backend.materialize(mig_codespace())
    assert taken.value.permanent


def test_inventory_comes_from_the_drivers_slices_and_taints_make_a_card_unhealthy(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    cluster.add_node("h100-04", ready=False)
    cluster.add_resource_slice(
        dra.mig_resource_slice(
            "h100-03", [("GPU-a", H100), ("GPU-b", H100)], driver=DRIVER, tainted=[1]
        )
    )
    cluster.add_resource_slice(
        dra.resource_slice("gpu-node-0", [("GPU-w0", H100, 81559)], driver=DRIVER)
    )
    cluster.add_resource_slice(dra.mig_resource_slice("h100-04", [("GPU-c", H100)], driver=DRIVER))
    # another driver's devices are not GPUs Tessera schedules
    cluster.add_resource_slice(
        dra.resource_slice("h100-04", [("NIC-0", "mlx5", 0)], driver="nic.example")
    )

    nodes = {n.name: n for n in backend.sync_inventory()}

    cards = [(g.index, g.uuid, g.model, g.memory_mib, g.healthy) for g in nodes["h100-03"].gpus]
    assert cards == [(0, "GPU-a", H100, 81920, True), (1, "GPU-b", H100, 81920, False)]
    assert nodes["h100-03"].gpu_model == H100
    assert [(g.uuid, g.memory_mib, g.healthy) for g in nodes["gpu-node-0"].gpus] == [
        ("GPU-w0", 81559, True)
    ]
    assert [(g.uuid, g.healthy) for g in nodes["h100-04"].gpus] == [("GPU-c", False)]  # not Ready
    assert "list_koordinator_devices" not in cluster.calls


def test_dra_objects_validate_against_the_1_34_and_1_35_schemas() -> None:
    objects = []
    for request in (mig_codespace(), whole_cards_pod(), codespace(gpus=(), home_volume_gib=0)):
        built = build_objects(request, config(c.Mode.DRA, storage_class="fast"), now=NOW)
        objects += [o for o in (built.pod, built.home_pvc, built.service, built.claim) if o]
    assert sorted({o["kind"] for o in objects}) == [
        "PersistentVolumeClaim",
        "Pod",
        "ResourceClaim",
        "Service",
    ]
    for version in ("1.34", "1.35"):
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)


def test_settings_name_the_driver_and_the_device_class_mapping() -> None:
    settings = type(
        "S",
        (),
        {
            "TESSERA_KUBE_MODE": "dra",
            "TESSERA_KUBE_DRA_DRIVER": "gpu.example.com",
            "TESSERA_KUBE_DRA_DEVICE_CLASSES": "whole.example.com=gpu, part.example.com=mig",
        },
    )
    configured = config_from_settings(settings)
    assert configured.mode == c.Mode.DRA
    assert configured.dra_driver == "gpu.example.com"
    assert configured.device_class("mig") == "part.example.com"
    assert configured.device_class("gpu") == "whole.example.com"
    with pytest.raises(ValueError, match="use <class>=<gpu|mig>"):
        parse_device_classes("gpu.nvidia.com")
    with pytest.raises(ValueError, match="DeviceClass mapping 'Bad Name'"):
        KubeConfig(dra_device_classes=(("Bad Name", "gpu"),))
    with pytest.raises(ValueError, match="'slice'"):
        KubeConfig(dra_device_classes=(("gpu.nvidia.com", "slice"),))
