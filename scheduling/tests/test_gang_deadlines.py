"""Gang deadlines bound gathering (waiting for every member to be placed together), never running (#3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from scheduling import services
from scheduling.choices import GangState, WorkloadState
from scheduling.models import Gang, Node, Placement
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MEMBER = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 4, "gpu_milli": 1000}


def submit_pair(quota: Any, *, timeout_seconds: int = 30) -> Gang:
    """A gang of 2 × 4 GPUs that needs both members placed together."""
    return services.submit_gang(
        tenant=quota.tenant, quota=quota, name="train", owner=None, members=[MEMBER] * 2,
        min_available=2, timeout_seconds=timeout_seconds,
    )  # fmt: skip


def placed_gang(clock: Any, *, gpu_nodes: int) -> tuple[Any, Gang]:
    """A gang placed whole, then 10 minutes pass: long after its 30 s gathering deadline."""
    small_cluster(gpu_nodes=gpu_nodes, gpus_per_node=4)
    q = make_quota(make_group())
    gang = submit_pair(q)
    services.run_cycle(q.group_id)
    gang.refresh_from_db()
    assert gang.state == GangState.PLACED
    clock.shift(timedelta(minutes=10))
    return q, gang


def test_placed_gang_with_a_member_requeued_after_its_deadline_is_not_timed_out() -> None:
    with time_machine.travel(START, tick=False) as clock:
        # given a placed gang past its deadline, on a cluster with a spare node
        q, gang = placed_gang(clock, gpu_nodes=3)
        first = gang.members.order_by("pk").first()
        assert first is not None
        node_id = Placement.objects.get(workload=first, released_at__isnull=True).node_id
        # when the node of one member fails (the gang is requeued whole) and the next cycle runs
        services.fail_node(node_id)
        gang.refresh_from_db()
        deadline = gang.deadline_at
        report = services.run_cycle(q.group_id)
    # then the gang gathered again within its fresh deadline (requeue + 30 s) instead of failing
    assert deadline == START + timedelta(minutes=10, seconds=30)
    assert report.timed_out_gangs == 0
    assert report.placed == 2
    gang.refresh_from_db()
    assert gang.state == GangState.PLACED
    assert set(gang.members.values_list("state", flat=True)) == {WorkloadState.PLACED}
    assert Placement.objects.filter(released_at__isnull=True, node_id=node_id).count() == 0


def test_gang_that_cannot_gather_again_times_out_at_its_fresh_deadline() -> None:
    with time_machine.travel(START, tick=False) as clock:
        # given a placed gang past its deadline that fills the cluster
        q, gang = placed_gang(clock, gpu_nodes=2)
        first = gang.members.order_by("pk").first()
        assert first is not None
        node_id = Placement.objects.get(workload=first, released_at__isnull=True).node_id
        # when one member's node fails: no node can take it back
        services.fail_node(node_id)
        clock.shift(timedelta(seconds=29))
        # then it keeps waiting until the fresh deadline, and times out there
        assert services.run_cycle(q.group_id).timed_out_gangs == 0
        gang.refresh_from_db()
        assert gang.state == GangState.WAITING
        clock.shift(timedelta(seconds=1))
        assert services.run_cycle(q.group_id).timed_out_gangs == 1
    gang.refresh_from_db()
    assert gang.state == GangState.TIMED_OUT
    assert set(gang.members.values_list("state", flat=True)) == {WorkloadState.FAILED}
    assert not Placement.objects.filter(released_at__isnull=True).exists()


def test_gang_that_never_gathers_times_out_at_its_submit_deadline() -> None:
    with time_machine.travel(START, tick=False) as clock:
        # given a gang that needs two 4-GPU nodes on a cluster of two, one of them cordoned
        # (a pool that could never hold it is refused at submit instead)
        small_cluster(gpu_nodes=2, gpus_per_node=4)
        services.cordon_node(Node.objects.order_by("name").last().pk, reason="maintenance")
        q = make_quota(make_group())
        gang = submit_pair(q)
        # then it waits until submit + 30 s and times out then
        clock.shift(timedelta(seconds=29))
        assert services.run_cycle(q.group_id).timed_out_gangs == 0
        clock.shift(timedelta(seconds=1))
        assert services.run_cycle(q.group_id).timed_out_gangs == 1
    gang.refresh_from_db()
    assert gang.state == GangState.TIMED_OUT
    assert set(gang.members.values_list("state", flat=True)) == {WorkloadState.FAILED}


def test_placed_gang_is_never_timed_out_however_late() -> None:
    with time_machine.travel(START, tick=False) as clock:
        # given a gang placed whole, 10 minutes after its deadline
        q, gang = placed_gang(clock, gpu_nodes=2)
        # when the reconciler and a cycle look at expired gangs
        assert services.expire_gangs() == []
        assert services.run_cycle(q.group_id).timed_out_gangs == 0
    # then it still runs
    gang.refresh_from_db()
    assert gang.state == GangState.PLACED
    assert set(gang.members.values_list("state", flat=True)) == {WorkloadState.PLACED}
