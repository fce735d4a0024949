"""Manifests per mode: exact names, labels, resources and annotations (spec 1.5, 2.5, 6.1)."""

from __future__ import annotations

import json

import pytest
from k8s_builders import GPU_A, GPU_B, NAMESPACE, NOW, codespace, config, gang_pod

from scheduling.backends.base import GpuBinding
from scheduling.backends.kubernetes.constants import Mode
from scheduling.backends.kubernetes.manifests import (
    ManifestError,
    build_objects,
    build_pod,
    intended_node,
    workload_selector,
)

EXPECTED_LABELS = {
    "app.kubernetes.io/managed-by": "tessera",
    "tessera.io/workload-id": "7",
    "tessera.io/workload-name": "cs-alice-7f3k",
    "tessera.io/kind": "codespace",
    "tessera.io/tenant": "team-a",
}


def test_hami_delegate_codespace_pins_node_by_affinity_and_gpu_by_uuid():
    pod = build_pod(codespace(), config(Mode.HAMI_DELEGATE), now=NOW)

    assert pod["metadata"] == {
        "name": "cs-alice-7f3k",
        "namespace": NAMESPACE,
        "labels": EXPECTED_LABELS,
        "annotations": {
            "tessera.io/priority": "5",
            "nvidia.com/use-gpuuuid": GPU_A,
            "hami.io/gpu-scheduler-policy": "binpack",
        },
    }
    spec = pod["spec"]
    assert spec["schedulerName"] == "hami-scheduler"
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node-3"]}
                ]
            }
        ]
    }
    container = spec["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "4000m", "memory": "16384Mi"},
        "limits": {
            "cpu": "4000m",
            "memory": "16384Mi",
            "nvidia.com/gpu": "1",
            "nvidia.com/gpumem": "12288",
            "nvidia.com/gpucores": "30",
        },
    }
    assert container["name"] == "workspace"
    assert container["env"] == [{"name": "TESSERA_USER", "value": "alice"}]
    assert container["volumeMounts"] == [{"name": "home", "mountPath": "/home/tessera"}]
    assert spec["volumes"] == [
        {"name": "home", "persistentVolumeClaim": {"claimName": "cs-alice-7f3k-home"}}
    ]
    assert spec["restartPolicy"] == "Always"
    assert spec["automountServiceAccountToken"] is False


def test_hami_bind_codespace_carries_allocation_annotations_label_and_foreign_scheduler():
    pod = build_pod(codespace(), config(Mode.HAMI_BIND), now=NOW)

    devices = f"{GPU_A},NVIDIA,12288,30:;"
    assert pod["metadata"]["annotations"] == {
        "tessera.io/priority": "5",
        "hami.io/vgpu-node": "gpu-node-3",
        "hami.io/vgpu-time": "1767225600",
        "hami.io/vgpu-devices-to-allocate": devices,
        "hami.io/vgpu-devices-allocated": devices,
        "hami.io/bind-phase": "allocating",
        "hami.io/bind-time": "1767225600",
    }
    assert pod["metadata"]["labels"] == {**EXPECTED_LABELS, "hami.io/vgpu-node": "gpu-node-3"}
    assert pod["spec"]["schedulerName"] == "tessera"
    assert "affinity" not in pod["spec"]
    assert "nodeName" not in pod["spec"]  # bound later through pods/binding
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_hami_bind_two_gpus_encode_one_container_entry():
    gpus = (
        GpuBinding(index=0, uuid="GPU-a", gpu_milli=500, gpu_memory_mib=20480),
        GpuBinding(index=1, uuid="GPU-b", gpu_milli=500, gpu_memory_mib=20480),
    )
    pod = build_pod(codespace(gpus=gpus), config(Mode.HAMI_BIND), now=NOW)

    annotations = pod["metadata"]["annotations"]
    assert annotations["hami.io/vgpu-devices-allocated"] == (
        "GPU-a,NVIDIA,20480,50:GPU-b,NVIDIA,20480,50:;"
    )
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["nvidia.com/gpumem"]) == ("2", "20480")


def test_hami_refuses_gpus_with_different_slices():
    gpus = (
        GpuBinding(index=0, uuid="GPU-a", gpu_milli=500, gpu_memory_mib=20480),
        GpuBinding(index=1, uuid="GPU-b", gpu_milli=300, gpu_memory_mib=20480),
    )
    with pytest.raises(ManifestError) as caught:
        build_pod(codespace(gpus=gpus), config(Mode.HAMI_DELEGATE), now=NOW)
    assert caught.value.permanent is True


def test_koordinator_codespace_has_hint_designated_allocation_and_equal_requests_limits():
    pod = build_pod(codespace(), config(Mode.KOORDINATOR), now=NOW)

    annotations = pod["metadata"]["annotations"]
    assert json.loads(annotations["internal.scheduling.koordinator.sh/scheduling-hint"]) == {
        "nodeNames": ["gpu-node-3"],
        "extensions": {"DeviceShare": {}},
    }
    assert json.loads(annotations["scheduling.koordinator.sh/device-allocated"]) == {
        "gpu": [
            {
                "minor": 2,
                "resources": {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory": "12Gi"},
            }
        ]
    }
    assert pod["metadata"]["labels"]["koordinator.sh/gpu-isolation-provider"] == "HAMi-core"
    assert pod["metadata"]["labels"]["quota.scheduling.koordinator.sh/name"] == "team-a"
    assert pod["spec"]["schedulerName"] == "koord-scheduler"
    resources = pod["spec"]["containers"][0]["resources"]
    expected = {
        "cpu": "4000m",
        "memory": "16384Mi",
        "koordinator.sh/gpu.shared": "1",
        "koordinator.sh/gpu-core": "30",
        "koordinator.sh/gpu-memory": "12Gi",
    }
    assert resources == {"requests": expected, "limits": expected}
    assert not any(k.startswith("nvidia.com/") for k in resources["limits"])


def test_koordinator_gang_member_carries_gang_annotations_and_whole_gpu_resources():
    pod = build_pod(gang_pod(1), config(Mode.KOORDINATOR), now=NOW)

    annotations = pod["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k.startswith("gang.")} == {
        "gang.scheduling.koordinator.sh/name": "job-train-12",
        "gang.scheduling.koordinator.sh/min-available": "2",
        "gang.scheduling.koordinator.sh/total-number": "2",
        "gang.scheduling.koordinator.sh/mode": "Strict",
        "gang.scheduling.koordinator.sh/waiting-time": "300s",
    }
    assert json.loads(annotations["scheduling.koordinator.sh/device-allocated"]) == {
        "gpu": [
            {
                "minor": 0,
                "resources": {
                    "koordinator.sh/gpu-core": "100",
                    "koordinator.sh/gpu-memory-ratio": "100",
                },
            }
        ]
    }
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["koordinator.sh/gpu-core"] == "100"
    assert limits["koordinator.sh/gpu-memory-ratio"] == "100"
    assert pod["metadata"]["labels"]["tessera.io/gang"] == "job-train-12"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["containers"][0]["command"] == ["python", "train.py"]


@pytest.mark.parametrize("mode", [Mode.HAMI_DELEGATE, Mode.HAMI_BIND])
def test_hami_gang_members_carry_tessera_gang_metadata(mode):
    pod = build_pod(gang_pod(0), config(mode), now=NOW)

    assert pod["metadata"]["labels"]["tessera.io/gang"] == "job-train-12"
    assert pod["metadata"]["annotations"]["tessera.io/gang-min-available"] == "2"


def test_koordinator_refuses_shared_multi_gpu_pod():
    gpus = (
        GpuBinding(index=0, uuid="GPU-a", gpu_milli=500, gpu_memory_mib=20480),
        GpuBinding(index=1, uuid="GPU-b", gpu_milli=500, gpu_memory_mib=20480),
    )
    with pytest.raises(ManifestError, match="shared multi-GPU"):
        build_pod(codespace(gpus=gpus), config(Mode.KOORDINATOR), now=NOW)


def test_cpu_only_pod_uses_default_scheduler_pinned_to_node():
    pod = build_pod(codespace(gpus=()), config(Mode.HAMI_BIND), now=NOW)

    assert "schedulerName" not in pod["spec"]
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["gpu-node-3"]
    assert set(pod["spec"]["containers"][0]["resources"]["limits"]) == {"cpu", "memory"}


def test_codespace_objects_have_deterministic_names_and_shared_labels():
    objects = build_objects(codespace(), config(storage_class="fast-ssd"), now=NOW)

    assert objects.home_pvc is not None
    assert objects.service is not None
    assert objects.home_pvc["metadata"]["name"] == "cs-alice-7f3k-home"
    assert objects.home_pvc["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "20Gi"}},
        "storageClassName": "fast-ssd",
    }
    assert objects.service["metadata"]["name"] == "cs-alice-7f3k"
    assert objects.service["spec"]["selector"] == {
        "app.kubernetes.io/managed-by": "tessera",
        "tessera.io/workload-id": "7",
    }
    assert objects.service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]
    for obj in (objects.pod, objects.home_pvc, objects.service):
        assert obj["metadata"]["labels"] == EXPECTED_LABELS
    assert build_objects(codespace(), config(storage_class="fast-ssd"), now=NOW) == objects


def test_job_pod_has_no_pvc_and_no_service():
    objects = build_objects(gang_pod(0), config(), now=NOW)

    assert (objects.home_pvc, objects.service) == (None, None)
    assert objects.pod["spec"]["containers"][0]["name"] == "main"


def test_codespace_without_home_gets_no_pvc_and_no_volume():
    objects = build_objects(codespace(home_volume_gib=0), config(), now=NOW)

    assert objects.home_pvc is None
    assert "volumes" not in objects.pod["spec"]


def test_caller_labels_cannot_override_tessera_labels():
    request = codespace(labels=(("tessera.io/workload-id", "999"), ("team", "vision")))
    pod = build_pod(request, config(), now=NOW)

    assert pod["metadata"]["labels"]["tessera.io/workload-id"] == "7"
    assert pod["metadata"]["labels"]["team"] == "vision"


def test_invalid_label_value_is_a_permanent_error():
    with pytest.raises(ManifestError, match="tessera.io/tenant"):
        build_pod(codespace(tenant_slug="team a!"), config(), now=NOW)


def test_runtime_class_and_pull_policy_come_from_config():
    pod = build_pod(
        codespace(), config(runtime_class="nvidia", image_pull_policy="Always"), now=NOW
    )

    assert pod["spec"]["runtimeClassName"] == "nvidia"
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "Always"


@pytest.mark.parametrize("mode", list(Mode))
def test_intended_node_reads_back_the_planned_node_in_every_mode(mode):
    for request in (codespace(), codespace(gpus=())):
        assert intended_node(build_pod(request, config(mode), now=NOW)) == "gpu-node-3"
    assert intended_node({"spec": {"nodeName": "n9"}}) == "n9"
    assert intended_node({"metadata": {}, "spec": {}}) == ""


def test_workload_selector_matches_one_workload():
    assert workload_selector(7) == "app.kubernetes.io/managed-by=tessera,tessera.io/workload-id=7"
    assert GPU_B.startswith("GPU-")
