"""Gangs are all-or-nothing under faults too: requeueing one member (its GPU or node failed, its node was
drained, its pod disappeared) requeues every placed member of its gang in the same transaction, and a
member whose pod failed takes down the members that can no longer reach `min_available` without it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from scheduling import services
from scheduling.backends.base import ObservedPhase, StatusReport
from scheduling.choices import GangState, WorkloadState
from scheduling.models import Gang, Placement, Workload
from scheduling.services.audit import run_audit
from scheduling.services.reconcile import apply_status_reports
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MEMBER = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 4, "gpu_milli": 1000}


def placed_pair(clock: Any, *, min_available: int = 2) -> tuple[Gang, Workload, Workload]:
    """A gang of 2 × 4 GPUs (min_available=2 unless told) placed whole on two of three nodes, running, then 10
    minutes pass (long after its 30 s gathering deadline)."""
    small_cluster(gpu_nodes=3, gpus_per_node=4)
    q = make_quota(make_group())
    gang = services.submit_gang(
        tenant=q.tenant, quota=q, name="train", owner=None, members=[MEMBER] * 2,
        min_available=min_available, timeout_seconds=30,
    )  # fmt: skip
    services.run_cycle(q.group_id)
    first, second = gang.members.order_by("pk")
    apply_status_reports([StatusReport(w.pk, ObservedPhase.RUNNING) for w in (first, second)])
    gang.refresh_from_db()
    assert gang.state == GangState.RUNNING
    clock.shift(timedelta(minutes=10))
    return gang, first, second


def open_placement(w: Workload) -> Placement:
    return Placement.objects.select_related("node").get(workload=w, released_at__isnull=True)


def fail_first_gpu(first: Workload) -> list[int]:
    gpu_id = open_placement(first).gpu_shares.values_list("gpu_id", flat=True).first()
    assert gpu_id is not None
    return services.fail_gpu(gpu_id)


def drain_first_node(first: Workload) -> list[int]:
    return services.drain_node(open_placement(first).node_id, reason="drained for a kernel upgrade")


def delete_first_pod(first: Workload) -> list[int]:
    apply_status_reports([StatusReport(first.pk, ObservedPhase.MISSING)])
    return [first.pk]


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        (fail_first_gpu, "failed"),
        (drain_first_node, "drained"),
        (delete_first_pod, "pod disappeared"),
    ],
    ids=["gpu-failure", "node-drain", "pod-deleted-behind-the-backend"],
)
def test_requeueing_one_gang_member_requeues_the_whole_gang(
    fault: Callable[[Workload], list[int]], cause: str
) -> None:
    with time_machine.travel(START, tick=False) as clock:
        # given a running gang of two on two different nodes
        gang, first, second = placed_pair(clock)
        assert open_placement(first).node_id != open_placement(second).node_id
        # when one member's GPU fails / its node is drained / its pod is deleted behind our back
        fault(first)
    # then both members are back in the queue, nothing of the gang stays placed
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, second.state) == (WorkloadState.PENDING, WorkloadState.PENDING)
    assert not Placement.objects.filter(workload__gang=gang, released_at__isnull=True).exists()
    # and the mate says why it moved: with its gang, because of the other member
    assert cause in first.pending_reason
    assert "with its gang" in second.pending_reason
    assert first.name in second.pending_reason
    assert cause in second.pending_reason
    # and the gang gathers again with a fresh deadline; the auditor finds no partial gang
    gang.refresh_from_db()
    assert gang.state == GangState.WAITING
    assert gang.deadline_at == START + timedelta(minutes=10, seconds=30)
    assert run_audit(only=["gang_whole"]).counts == {"gang_whole": 0}


def test_gpu_failure_of_a_gang_member_returns_every_requeued_member() -> None:
    with time_machine.travel(START, tick=False) as clock:
        _, first, second = placed_pair(clock)
        requeued = fail_first_gpu(first)
    assert requeued == [first.pk, second.pk]


def test_requeued_gang_regathers_on_the_spare_nodes_at_the_next_cycle() -> None:
    with time_machine.travel(START, tick=False) as clock:
        # given a running gang whose first member's node fails (one spare node left next to the mate)
        gang, first, second = placed_pair(clock)
        failed_node = open_placement(first).node_id
        services.fail_node(failed_node)
        # when the next cycle runs
        report = services.run_cycle(first.quota.group_id)
    # then the whole gang is placed again, together, off the failed node
    assert report.placed == 2
    assert report.timed_out_gangs == 0
    gang.refresh_from_db()
    assert gang.state == GangState.PLACED
    assert not Placement.objects.filter(released_at__isnull=True, node_id=failed_node).exists()


def test_failed_member_of_a_gang_that_needs_it_fails_the_gang_and_releases_the_rest() -> None:
    with time_machine.travel(START, tick=False) as clock:
        # given a running gang that needs both its members
        gang, first, second = placed_pair(clock)
        # when the pod of one member fails
        apply_status_reports([StatusReport(first.pk, ObservedPhase.FAILED, "OOMKilled")])
    # then the other one fails with it (it cannot run alone), saying why, and holds nothing
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, second.state) == (WorkloadState.FAILED, WorkloadState.FAILED)
    assert first.failure_reason == "OOMKilled"
    assert "with its gang" in second.failure_reason
    assert first.name in second.failure_reason
    assert "OOMKilled" in second.failure_reason
    assert not Placement.objects.filter(workload__gang=gang, released_at__isnull=True).exists()
    gang.refresh_from_db()
    assert gang.state == GangState.FAILED
    assert run_audit(only=["gang_whole"]).counts == {"gang_whole": 0}


def test_failed_member_of_a_gang_that_still_has_min_available_leaves_the_rest_running() -> None:
    with time_machine.travel(START, tick=False) as clock:
        # given a running gang of two that needs only one
        gang, first, second = placed_pair(clock, min_available=1)
        # when the pod of one member fails
        apply_status_reports([StatusReport(first.pk, ObservedPhase.FAILED, "OOMKilled")])
    # then the other one runs on
    second.refresh_from_db()
    assert second.state == WorkloadState.RUNNING
    assert Placement.objects.filter(workload=second, released_at__isnull=True).exists()
    gang.refresh_from_db()
    assert gang.state == GangState.RUNNING
    assert run_audit(only=["gang_whole"]).counts == {"gang_whole": 0}
