"""Fixtures of the codespaces app (registered in the root conftest.py).

A small simulated pool `gpu` (one node with 2 × H100 80 GB, one with 1 × T4 16 GB, one CPU-only node),
quotas for team-a (max 1 GPU) and team-b (max 1 GPU), and a `pytorch` template with four sizes.
"""

from __future__ import annotations

from typing import Any

import pytest

from codespaces.choices import GpuMode
from codespaces.models import CodespaceTemplate
from codespaces.tests.factories import CodespaceTemplateFactory, TemplatePresetFactory
from quotas.models import Quota, QuotaGroup
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node

GIB = 1024


def quota_with(group: QuotaGroup, tenant: Any, *, max_gpus: float, min_gpus: float = 0) -> Quota:
    """A quota whose GPU side allows `max_gpus` cards (ample CPU and memory on both sides)."""
    return QuotaFactory(
        group=group,
        tenant=tenant,
        name=tenant.slug,
        gpu_min_gpu_milli=int(min_gpus * 1000),
        gpu_max_gpu_milli=int(max_gpus * 1000),
        gpu_min_gpu_memory_mib=int(min_gpus * 80 * GIB),
        gpu_max_gpu_memory_mib=int(max_gpus * 80 * GIB),
        gpu_max_cpu_milli=64000,
        gpu_max_memory_mib=512 * GIB,
        gpu_min_cpu_milli=int(min_gpus * 16000),
        gpu_min_memory_mib=int(min_gpus * 64 * GIB),
        cpu_max_cpu_milli=32000,
        cpu_max_memory_mib=128 * GIB,
    )


@pytest.fixture
def gpu_pool(db: Any) -> QuotaGroup:
    group = QuotaGroupFactory(name="gpu", node_selector={"pool": "gpu"})
    make_node("h100-a", pool="gpu", gpu_count=2, gpu_memory_mib=80 * GIB, gpu_model="H100")
    make_node("t4-a", pool="gpu", gpu_count=1, gpu_memory_mib=16 * GIB, gpu_model="T4")
    make_node("cpu-a", pool="gpu", gpu_count=0)
    return group


@pytest.fixture
def quota_a(gpu_pool: QuotaGroup, team_a: Any) -> Quota:
    return quota_with(gpu_pool, team_a, max_gpus=1, min_gpus=1)


@pytest.fixture
def quota_b(gpu_pool: QuotaGroup, team_b: Any) -> Quota:
    return quota_with(gpu_pool, team_b, max_gpus=1, min_gpus=1)


@pytest.fixture
def template(db: Any) -> CodespaceTemplate:
    tpl = CodespaceTemplateFactory(name="pytorch", display_name="PyTorch", max_per_user=2)
    TemplatePresetFactory(
        template=tpl,
        name="quarter-h100",
        label="1/4 H100: 25% compute, 20 GiB",
        gpu_model="H100",
        position=0,
    )
    TemplatePresetFactory(
        template=tpl,
        name="2x-h100",
        label="2 × H100 NVLink",
        gpu_mode=GpuMode.WHOLE,
        gpu_count=2,
        gpu_percent=0,
        gpu_memory_gib=0,
        gpu_model="H100",
        position=1,
    )
    TemplatePresetFactory(
        template=tpl,
        name="t4",
        label="1 × T4",
        gpu_mode=GpuMode.WHOLE,
        gpu_count=1,
        gpu_percent=0,
        gpu_memory_gib=0,
        gpu_model="T4",
        position=2,
    )
    TemplatePresetFactory(
        template=tpl,
        name="cpu",
        label="CPU only",
        gpu_mode=GpuMode.NONE,
        gpu_count=0,
        gpu_percent=0,
        gpu_memory_gib=0,
        position=3,
    )
    return tpl
