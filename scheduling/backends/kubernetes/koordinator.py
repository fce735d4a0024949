"""Koordinator's wire formats: scheduling hint, designated device allocation, gang annotations.

Follows k8s-integration.md sections 2.2, 2.5 and 6.1 (Koordinator v1.8).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from core.units import WHOLE_CARD_MILLI
from scheduling.backends.base import GpuBinding
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.hami import gpu_cores_percent
from scheduling.backends.kubernetes.quantity import format_mib


def is_whole_gpu(gpu: GpuBinding) -> bool:
    return gpu.gpu_milli >= WHOLE_CARD_MILLI


def per_gpu_resources(gpu: GpuBinding) -> dict[str, str]:
    """Resources of one GPU in the designated allocation: a whole card is core 100 + ratio 100, a
    slice is core % + memory bytes (the valid combinations of spec section 2.1)."""
    if is_whole_gpu(gpu):
        return {c.KOORD_GPU_CORE: "100", c.KOORD_GPU_MEMORY_RATIO: "100"}
    return {
        c.KOORD_GPU_CORE: str(gpu_cores_percent(gpu.gpu_milli)),
        c.KOORD_GPU_MEMORY: format_mib(gpu.gpu_memory_mib),
    }


def container_resources(gpus: Sequence[GpuBinding]) -> dict[str, str]:
    """Extended resources for the container (requests == limits): `gpu.shared` = number of GPUs,
    core and memory summed over them."""
    count = len(gpus)
    if all(is_whole_gpu(gpu) for gpu in gpus):
        return {
            c.KOORD_GPU_SHARED: str(count),
            c.KOORD_GPU_CORE: str(100 * count),
            c.KOORD_GPU_MEMORY_RATIO: str(100 * count),
        }
    return {
        c.KOORD_GPU_SHARED: str(count),
        c.KOORD_GPU_CORE: str(sum(gpu_cores_percent(gpu.gpu_milli) for gpu in gpus)),
        c.KOORD_GPU_MEMORY: format_mib(sum(gpu.gpu_memory_mib for gpu in gpus)),
    }


def device_allocated(gpus: Sequence[GpuBinding]) -> str:
    """`scheduling.koordinator.sh/device-allocated`: `{"gpu":[{"minor":i,"resources":{...}}]}`."""
    entries = [{"minor": gpu.index, "resources": per_gpu_resources(gpu)} for gpu in gpus]
    return json.dumps({"gpu": entries}, separators=(",", ":"))


def scheduling_hint(node_name: str) -> str:
    """Hard node constraint plus the DeviceShare key that makes device-allocated designated."""
    return json.dumps(
        {"nodeNames": [node_name], "extensions": {"DeviceShare": {}}}, separators=(",", ":")
    )


def gang_annotations(name: str, min_available: int, waiting_time: str) -> dict[str, str]:
    """Strict gang: every member names the gang and its size (Tessera places all members)."""
    size = str(max(1, min_available))
    return {
        c.KOORD_GANG_NAME: name,
        c.KOORD_GANG_MIN_AVAILABLE: size,
        c.KOORD_GANG_TOTAL_NUMBER: size,
        c.KOORD_GANG_MODE: "Strict",
        c.KOORD_GANG_WAITING_TIME: waiting_time,
    }
