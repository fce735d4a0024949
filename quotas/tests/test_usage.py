"""Group capacity and snapshots (quotas.usage) against real Node/Gpu/Workload rows."""

from __future__ import annotations

import pytest
from django.test import override_settings

from quotas.resources import Resources, Side
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node, make_workload
from quotas.usage import group_capacity, group_snapshot, node_matches

pytestmark = pytest.mark.django_db


def test_node_matches_every_selector_pair():
    assert node_matches({"pool": "training", "zone": "a"}, {"pool": "training"})
    assert not node_matches({"pool": "interactive"}, {"pool": "training"})
    assert node_matches({"pool": "x"}, {})


@override_settings(
    TESSERA_GPU_NODE_CPU_RESERVED_FRACTION=0.25, TESSERA_GPU_NODE_MEMORY_RESERVED_FRACTION=0.5
)
def test_capacity_counts_healthy_gpus_and_splits_cpu_between_sides():
    # given two GPU nodes (one with an unhealthy GPU), a CPU node, a cordoned node, a failed node,
    # and a node of another pool
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=4, cpu_milli=64000, memory_mib=512000)
    make_node(
        "g2", pool="training", gpu_count=4, unhealthy_gpus=1, cpu_milli=32000, memory_mib=256000
    )
    make_node("c1", pool="training", cpu_milli=16000, memory_mib=64000)
    make_node("cordoned", pool="training", gpu_count=8, cordoned=True)
    make_node("failed", pool="training", gpu_count=8, healthy=False)
    make_node("other", pool="interactive", gpu_count=8)
    # when the capacity is computed
    capacity = group_capacity(group)
    # then the GPU side has 7 healthy GPUs and all CPU/memory of the GPU nodes
    assert capacity.gpu == Resources(
        gpu_milli=7000, gpu_memory_mib=7 * 81920, cpu_milli=96000, memory_mib=768000
    )
    # and the CPU side has the CPU node plus the unreserved part of the GPU nodes
    assert capacity.cpu == Resources(
        cpu_milli=16000 + 48000 + 24000, memory_mib=64000 + 256000 + 128000
    )
    assert (capacity.nodes_counted, capacity.nodes_excluded) == (3, 2)
    assert (capacity.gpus_healthy, capacity.gpus_unhealthy) == (7, 1)


def test_reservation_row_overrides_the_fraction():
    from scheduling.models import Reservation

    group = QuotaGroupFactory(name="training")
    node = make_node("g1", pool="training", gpu_count=1, cpu_milli=10000, memory_mib=10000)
    Reservation.objects.create(node=node, cpu_milli=4000, memory_mib=1000)
    assert group_capacity(group).cpu == Resources(cpu_milli=6000, memory_mib=9000)


def test_snapshot_charges_gpu_work_to_gpu_side_and_counts_pending_as_demand(team_a, team_b):
    # given 8 GPUs, team-a (min 2, max 8) and team-b (min 2, max 4)
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=8)
    qa = QuotaFactory(
        group=group,
        tenant=team_a,
        gpu_min_gpu_milli=2000,
        gpu_max_gpu_milli=8000,
        gpu_max_cpu_milli=64000,
        gpu_max_memory_mib=10**6,
        cpu_max_cpu_milli=8000,
        cpu_max_memory_mib=10**5,
    )
    QuotaFactory(
        group=group,
        tenant=team_b,
        gpu_min_gpu_milli=2000,
        gpu_max_gpu_milli=4000,
        gpu_max_cpu_milli=64000,
        gpu_max_memory_mib=10**6,
    )
    make_workload(qa, gpu_count=3, cpu_milli=4000, memory_mib=2048)
    make_workload(qa, state="pending", gpu_count=2)
    make_workload(qa, gpu_count=0, cpu_milli=2000, memory_mib=4096)  # CPU-only
    make_workload(qa, state="succeeded", gpu_count=4)  # finished: ignored
    # when the snapshot is taken
    snapshot = group_snapshot(group)
    a = snapshot.by_name("team-a")
    # then
    assert a.gpu.used == Resources(gpu_milli=3000, cpu_milli=4000, memory_mib=2048)
    assert a.gpu.pending == Resources(gpu_milli=2000, cpu_milli=1000, memory_mib=1024)
    assert a.gpu.demand.gpu_milli == 5000
    assert a.cpu.used == Resources(cpu_milli=2000, memory_mib=4096)
    # team-b is idle and lends its min: team-a gets all it asks for
    assert a.gpu.runtime.gpu_milli == 5000
    assert a.gpu.borrowed.gpu_milli == 1000
    # headroom: b lends its idle min, so asking for its whole max team-a would get all 8 GPUs; 3 in use
    assert a.gpu.headroom.gpu_milli == 5000
    assert a.gpu.guaranteed_headroom.gpu_milli == 0
    # team-b asking for its max 4: min 2, then the 4 idle GPUs split by weight 8000:4000 with team-a
    assert snapshot.by_name("team-b").gpu.headroom.gpu_milli == 3333
    assert snapshot.by_name("team-b").gpu.guaranteed_headroom.gpu_milli == 2000
    assert snapshot.free(Side.GPU).gpu_milli == 5000


def _pure_snapshot(workloads, specs):
    from quotas.usage import GroupCapacity, build_snapshot

    return build_snapshot(
        group_id=1,
        group_name="g",
        allow_overcommitted_min=False,
        capacity=GroupCapacity(gpu=Resources(8000, 0, 64000, 0), cpu=Resources(0, 0, 32000, 0)),
        specs=specs,
        workloads=workloads,
        headroom=False,
    )


def test_incremental_copies_equal_a_full_recomputation():
    from dataclasses import replace

    from quotas.usage import QuotaSpec, WorkloadUsage

    specs = [
        QuotaSpec(
            quota_id=i,
            name=f"q{i}",
            tenant_id=i,
            tenant_slug=f"t{i}",
            lend_idle_min=True,
            min={Side.GPU: Resources(gpu_milli=1000 * i), Side.CPU: Resources(cpu_milli=1000)},
            max={Side.GPU: Resources(8000, 0, 64000, 0), Side.CPU: Resources(0, 0, 32000, 0)},
            weight={Side.GPU: Resources(8000, 0, 64000, 0), Side.CPU: Resources(0, 0, 32000, 0)},
        )
        for i in (1, 2, 3)
    ]

    def work(wid, quota_id, gpus, active, side=Side.GPU):
        return WorkloadUsage(
            wid,
            f"w{wid}",
            "job_pod",
            quota_id,
            side,
            Resources(gpus * 1000, 0, 2000, 0),
            active,
            preemptible=wid % 2 == 0,
        )

    base = [
        work(1, 1, 2, True),
        work(2, 2, 1, False),
        work(3, 3, 3, True),
        work(4, 1, 0, True, Side.CPU),
    ]
    extra = [work(5, 2, 2, False), replace(base[1], active=True)]
    incremental = _pure_snapshot(base, specs).with_workloads(extra).without_workloads([3])
    full = _pure_snapshot([base[0], base[3], *extra], specs)
    assert incremental.quotas == full.quotas
    assert sorted(w.workload_id for w in incremental.workloads) == [1, 2, 4, 5]
