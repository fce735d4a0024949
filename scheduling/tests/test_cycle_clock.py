"""A cycle acts at the time it holds the shard lock, not the time it started waiting for it (#15)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from scheduling import services
from scheduling.choices import GangState, WorkloadState
from scheduling.models import Node, Shard, Workload
from scheduling.services import cycle
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
LOCK_WAIT = timedelta(seconds=90)


def test_cycle_records_and_decides_at_the_time_it_got_the_shard_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with time_machine.travel(START, tick=False) as clock:
        # given a slice waiting and a gang whose deadline falls while the next cycle waits for the lock
        # (two nodes, one cordoned: a pool that could never hold the gang refuses it at submit)
        small_cluster(gpu_nodes=2, gpus_per_node=4)
        services.cordon_node(Node.objects.order_by("name").last().pk, reason="maintenance")
        q = make_quota(make_group())
        w = services.submit_workload(
            tenant=q.tenant, quota=q, kind="job_pod", name="nb", cpu_milli=1000,
            memory_mib=1024, gpu_count=1, gpu_milli=1000,
        )  # fmt: skip
        member = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 4, "gpu_milli": 1000}
        gang = services.submit_gang(
            tenant=q.tenant, quota=q, name="big", owner=None, members=[member] * 2,
            min_available=2, timeout_seconds=60,
        )  # fmt: skip
        real_lock = cycle.lock_shard

        def slow_lock(group_id: int) -> None:
            clock.shift(LOCK_WAIT)  # another cycle of the shard held the lock for 90 s
            real_lock(group_id)

        monkeypatch.setattr(cycle, "lock_shard", slow_lock)
        # when the cycle runs
        report = services.run_cycle(q.group_id)
    # then what it placed, recorded and timed out is dated when it held the lock
    acted_at = START + LOCK_WAIT
    w.refresh_from_db()
    assert w.state == WorkloadState.PLACED
    assert w.placed_at == acted_at
    assert w.placements.get().created_at == acted_at
    assert Shard.objects.get(group_id=q.group_id).last_cycle_at == acted_at
    assert report.timed_out_gangs == 1
    gang.refresh_from_db()
    assert gang.state == GangState.TIMED_OUT
    assert set(Workload.objects.filter(gang=gang).values_list("finished_at", flat=True)) == {
        acted_at
    }
