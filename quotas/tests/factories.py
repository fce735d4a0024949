"""factory_boy factories for quota groups and quotas, plus small builders for the scheduling rows the quota
code reads (nodes, GPUs, workloads). The builders only create rows for tests; they are not services."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import factory
from django.utils import timezone

from portal.models import Tenant
from portal.tests.factories import TenantFactory
from quotas.models import Quota, QuotaGroup
from scheduling.telemetry.models import QuotaSample, Resolution

_uuid = itertools.count(1)


class QuotaGroupFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = QuotaGroup
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"pool-{n}")
    node_selector = factory.LazyAttribute(lambda g: {"pool": g.name})


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    group = factory.SubFactory(QuotaGroupFactory)
    tenant = factory.SubFactory(TenantFactory)
    name = factory.LazyAttribute(lambda q: q.tenant.slug)


def gpus(count: int) -> int:
    """GPU count → gpu_milli."""
    return int(count * 1000)


def make_node(
    name: str,
    *,
    pool: str,
    gpu_count: int = 0,
    gpu_memory_mib: int = 81920,
    cpu_milli: int = 64000,
    memory_mib: int = 512 * 1024,
    cordoned: bool = False,
    healthy: bool = True,
    unhealthy_gpus: int = 0,
    gpu_model: str = "H100",
) -> Any:
    """A Node labelled `pool=<pool>` with `gpu_count` GPUs (the last `unhealthy_gpus` of them unhealthy)."""
    from scheduling.models import Gpu, Node

    node = Node.objects.create(
        name=name,
        pool=pool,
        labels={"pool": pool, "gpu-model": gpu_model if gpu_count else "none"},
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        gpu_model=gpu_model if gpu_count else "",
        cordoned=cordoned,
        healthy=healthy,
    )
    for index in range(gpu_count):
        Gpu.objects.create(
            node=node,
            index=index,
            uuid=f"GPU-test-{next(_uuid):06d}",
            model=gpu_model,
            memory_mib=gpu_memory_mib,
            healthy=index < gpu_count - unhealthy_gpus,
        )
    return node


def make_workload(
    quota: Quota,
    *,
    name: str = "",
    state: str = "running",
    gpu_count: int = 0,
    gpu_milli: int = 1000,
    gpu_memory_mib: int = 0,
    cpu_milli: int = 1000,
    memory_mib: int = 1024,
    priority: int = 0,
    preemptible: bool = True,
    gang: Any = None,
    kind: str = "job_pod",
    started_at: datetime | None = None,
) -> Any:
    """A Workload row of `quota` in `state` (running/placed ones get a start time)."""
    from scheduling.models import Workload

    active = state in ("running", "placed")
    return Workload.objects.create(
        tenant=quota.tenant,
        quota=quota,
        kind=kind,
        name=name or f"w{next(_uuid)}",
        gang=gang,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        gpu_count=gpu_count,
        gpu_milli=gpu_milli if gpu_count else 0,
        gpu_memory_mib=gpu_memory_mib if gpu_count else 0,
        priority=priority,
        preemptible=preemptible,
        state=state,
        placed_at=(started_at or timezone.now()) if active else None,
        started_at=(started_at or timezone.now()) if state == "running" else None,
    )


def make_gang(quota: Quota, name: str, *, min_available: int) -> Any:
    from scheduling.models import Gang

    return Gang.objects.create(
        name=name, tenant=quota.tenant, quota=quota, min_available=min_available
    )


NO_GPU_SIDE_LIMIT = {
    "gpu_max_gpu_memory_mib": 10**7,
    "gpu_max_cpu_milli": 10**6,
    "gpu_max_memory_mib": 10**8,
}
"""GPU-side maxima no test workload reaches (GPU memory, CPU and memory), so only GPUs count."""


@dataclass(frozen=True)
class TwoTeamsAndALender:
    group: QuotaGroup
    a: Quota
    b: Quota
    lender: Quota


def two_teams_and_a_lender(
    *,
    half_life: int | None,
    team_a: Tenant | None = None,
    team_b: Tenant | None = None,
    lender_slug: str = "lab",
    gpus: int = 8,
    **lender_fields: Any,
) -> TwoTeamsAndALender:
    """The fairness-over-time pool (its nodes are the caller's): group `training` (pool=training) with
    a fair-share half-life of `half_life` hours (None: off); `team-a` and `team-b` with no min and a max
    of `gpus` GPUs; a lender (`lender_slug`) with a min of `gpus` GPUs (plus `lender_fields`); all of
    weight 1, each quota named after its tenant."""
    group = QuotaGroupFactory(name="training", fair_share_half_life_hours=half_life)
    teams = (team_a or TenantFactory(slug="team-a"), team_b or TenantFactory(slug="team-b"))
    a, b = (
        QuotaFactory(
            group=group,
            tenant=tenant,
            gpu_max_gpu_milli=gpus * 1000,
            shared_weight=1,
            **NO_GPU_SIDE_LIMIT,
        )
        for tenant in teams
    )
    lender = QuotaFactory(
        group=group,
        tenant=TenantFactory(slug=lender_slug),
        gpu_min_gpu_milli=gpus * 1000,
        gpu_max_gpu_milli=gpus * 1000,
        shared_weight=1,
        **{**NO_GPU_SIDE_LIMIT, **lender_fields},
    )
    return TwoTeamsAndALender(group, a, b, lender)


def record_gpu_hours(quota: Quota, hour: datetime, gpu_hours: float, model: str = "H100") -> Any:
    """One telemetry hour row: `quota` held `gpu_hours` GPU-hours of `model` in the hour from `hour`
    (what fair share over time and GPU-hour budgets read)."""
    return QuotaSample.objects.create(
        resolution=Resolution.HOUR,
        ts=hour,
        minutes=60,
        group=quota.group,
        quota=quota,
        tenant=quota.tenant,
        gpu_model=model,
        allocated_milli=gpu_hours * 1000 * 60,
    )
