"""A fragmented pool for defragmentation tests: two 8-GPU H100 nodes, one small job running on each, and an
8-GPU job waiting although 14 GPUs are free (no node has 8)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from portal.models import Tenant
from quotas.models import Quota
from scheduling import services
from scheduling.backends.base import ObservedPhase, StatusReport
from scheduling.models import Node, Workload
from scheduling.services.reconcile import apply_status_reports
from scheduling.tests.factories import make_group, make_quota, small_cluster

SMALL = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000}
BIG = {"cpu_milli": 4000, "memory_mib": 8192, "gpu_count": 8, "gpu_milli": 1000}


@dataclass
class Fragmented:
    quota: Quota
    first: Workload  # on training-g0
    second: Workload  # on training-g1
    waiting: Workload  # the 8-GPU job


def run(w: Workload) -> None:
    apply_status_reports([StatusReport(w.pk, ObservedPhase.RUNNING)])


def place_on(node: Node, other: Node, make: Callable[[], Workload], group_id: int) -> Workload:
    """Submit `make()` while `other` is cordoned, so it lands on `node` (also when Celery is eager and
    the cycle runs at the submit's commit), and report it running."""
    services.cordon_node(other.pk, reason="test: steer the placement")
    w = make()
    services.run_cycle(group_id)
    services.uncordon_node(other.pk)
    w.refresh_from_db()
    run(w)
    return w


def submit(quota: Quota, name: str, shape: dict[str, int], **extra: Any) -> Workload:
    return services.submit_workload(
        tenant=quota.tenant, quota=quota, kind="job_pod", name=name, **shape, **extra
    )


def fragmented_pool(tenant: Tenant | None = None, *, first_kind: str = "job_pod") -> Fragmented:
    small_cluster(gpu_nodes=2, gpus_per_node=8, model="H100", gpu_memory_mib=81920)
    quota = make_quota(make_group(), tenant)
    g0, g1 = Node.objects.get(name="training-g0"), Node.objects.get(name="training-g1")
    first = place_on(g0, g1, lambda: submit(quota, "small-a", SMALL), quota.group_id)
    second = place_on(g1, g0, lambda: submit(quota, "small-b", SMALL), quota.group_id)
    waiting = submit(quota, "big", BIG)
    services.run_cycle(quota.group_id)
    for w in (first, second, waiting):
        w.refresh_from_db()
    return Fragmented(quota, first, second, waiting)


def keep_both_in_place(pool: Fragmented) -> None:
    """The policy may move neither small job: the first is not preemptible, the second is exempt."""
    Workload.objects.filter(pk=pool.first.pk).update(preemptible=False)
    Workload.objects.filter(pk=pool.second.pk).update(movable=False)
