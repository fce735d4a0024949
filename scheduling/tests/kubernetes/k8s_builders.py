"""Builders shared by the Kubernetes backend tests (plain objects, no database)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from scheduling.backends.base import GpuBinding, MaterializeRequest, WorkloadKind
from scheduling.backends.kubernetes.config import KubeConfig
from scheduling.backends.kubernetes.constants import Mode

NAMESPACE = "tessera-workloads"
NOW = 1767225600  # 2026-01-01T00:00:00Z
GPU_A = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
GPU_B = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"


def config(mode: Mode = Mode.HAMI_DELEGATE, **overrides: Any) -> KubeConfig:
    return KubeConfig(namespace=NAMESPACE, mode=mode, **overrides)


def codespace(**overrides: Any) -> MaterializeRequest:
    """The spec's example codespace: 30 % of one GPU and 12 GiB, 4 CPUs, 16 GiB, 20 GiB home."""
    base = MaterializeRequest(
        workload_id=7,
        name="cs-alice-7f3k",
        kind=WorkloadKind.CODESPACE,
        tenant_slug="team-a",
        image="registry.example/codespace:cuda12",
        node_name="gpu-node-3",
        cpu_milli=4000,
        memory_mib=16384,
        gpus=(GpuBinding(index=2, uuid=GPU_A, gpu_milli=300, gpu_memory_mib=12288),),
        gpu_model="NVIDIA-A100-SXM4-80GB",
        env=(("TESSERA_USER", "alice"),),
        home_volume_gib=20,
        priority=5,
    )
    return dataclasses.replace(base, **overrides)


def gang_pod(index: int = 0, **overrides: Any) -> MaterializeRequest:
    """Member `index` of a 2-pod training job, each pod with one whole GPU."""
    base = MaterializeRequest(
        workload_id=100 + index,
        name=f"job-train-12-pod-{index}",
        kind=WorkloadKind.JOB_POD,
        tenant_slug="team-a",
        image="registry.example/train:1.0",
        node_name=f"gpu-node-{index}",
        cpu_milli=8000,
        memory_mib=65536,
        gpus=(GpuBinding(index=0, uuid=GPU_B, gpu_milli=1000, gpu_memory_mib=81920),),
        command=("python", "train.py"),
        gang_name="job-train-12",
        gang_min_available=2,
    )
    return dataclasses.replace(base, **overrides)


def hami_register_json(*uuids: str, memory: int = 81920) -> str:
    return json.dumps(
        [
            {
                "id": uuid,
                "index": i,
                "count": 10,
                "devmem": memory,
                "devcore": 100,
                "type": "NVIDIA-NVIDIA A100-SXM4-80GB",
                "numa": i,
                "mode": "hami-core",
                "health": True,
            }
            for i, uuid in enumerate(uuids)
        ]
    )
