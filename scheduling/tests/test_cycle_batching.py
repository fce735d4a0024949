"""The cycle's follow-ups cost the same whatever their size: making placed workloads real, removing
released ones and requeueing a reclaim's victims take a constant number of queries and one cycle
trigger, and a cycle that read a full batch and placed some runs again at once (bench.scale's costs;
a per-row loop coming back fails these)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling import services, tasks
from scheduling.choices import WorkloadState
from scheduling.followups import followups
from scheduling.models import SimulatedPod, Workload
from scheduling.tests.factories import make_group, make_quota, small_cluster, submit_whole_gpu_jobs

pytestmark = pytest.mark.django_db


@pytest.fixture
def quota() -> Any:
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    return make_quota(make_group())


@pytest.fixture
def cycles_sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The shard cycles the services ask for (recorded instead of run)."""
    sent: list[int] = []
    monkeypatch.setattr(followups(), "run_cycle", sent.append)
    return sent


def test_materializing_many_placements_takes_as_many_queries_as_one(quota: Any) -> None:
    one, *many = submit_whole_gpu_jobs(quota, 6, "m")
    assert services.run_cycle(quota.group_id).placed == 6
    with CaptureQueriesContext(connection) as single:
        assert tasks.materialize_workloads_task([one.pk]) == 1
    with CaptureQueriesContext(connection) as batch:
        assert tasks.materialize_workloads_task([w.pk for w in many]) == 5
    assert len(batch) == len(single)
    pods = SimulatedPod.objects.in_bulk(field_name="workload_id")
    assert sorted(pods) == sorted(w.pk for w in (one, *many))
    # and again is a no-op: create-or-get keeps each pod of its placement
    assert tasks.materialize_workloads_task([w.pk for w in many]) == 5
    assert SimulatedPod.objects.count() == 6


def test_releasing_many_placements_takes_as_many_queries_as_one(
    quota: Any,
    monkeypatch: pytest.MonkeyPatch,
    cycles_sent: list[int],
    django_capture_on_commit_callbacks: Any,
) -> None:
    jobs = submit_whole_gpu_jobs(quota, 6, "r")
    services.run_cycle(quota.group_id)
    tasks.materialize_workloads_task([w.pk for w in jobs])
    sent: list[list[Any]] = []
    monkeypatch.setattr(tasks.release_backend_objects_task, "delay", sent.append)
    with django_capture_on_commit_callbacks(execute=True):
        services.requeue_workloads([w.pk for w in jobs], reason="Requeued: test.", code="test")
    # one message for the six placements
    (items,) = sent
    assert len(items) == 6
    with CaptureQueriesContext(connection) as single:
        assert tasks.release_backend_objects_task(items[:1]) == 1
    with CaptureQueriesContext(connection) as batch:
        assert tasks.release_backend_objects_task(items[1:]) == 5
    assert len(batch) == len(single)
    assert SimulatedPod.objects.count() == 0


def test_requeueing_with_a_reason_each_moves_all_in_one_go_and_triggers_one_cycle(
    quota: Any, cycles_sent: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    jobs = submit_whole_gpu_jobs(quota, 6, "q")
    services.run_cycle(quota.group_id)
    reasons = {w.pk: f"Reclaimed: victim {i % 3}." for i, w in enumerate(jobs)}
    with django_capture_on_commit_callbacks(execute=True):
        assert services.requeue_each(reasons, code="reclaimed") == sorted(reasons)
    assert cycles_sent == [quota.group_id]
    rows = Workload.objects.filter(pk__in=reasons)
    assert {w.pk: (w.state, w.pending_code, w.pending_reason) for w in rows} == {
        pk: (WorkloadState.PENDING, "reclaimed", why) for pk, why in reasons.items()
    }


def test_requeueing_many_takes_as_many_queries_as_requeueing_two(quota: Any) -> None:
    jobs = submit_whole_gpu_jobs(quota, 8, "n")
    services.run_cycle(quota.group_id)
    with CaptureQueriesContext(connection) as two:
        services.requeue_each({w.pk: "Reclaimed: a." for w in jobs[:2]}, code="reclaimed")
    with CaptureQueriesContext(connection) as six:
        services.requeue_each({w.pk: "Reclaimed: a." for w in jobs[2:]}, code="reclaimed")
    assert len(six) == len(two)


def test_a_reclaim_of_many_victims_triggers_one_cycle(
    cycles_sent: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    # given a lender on all 8 GPUs and a quota guaranteed 4
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    group = make_group()
    lender = make_quota(group, name="lender")
    owner = make_quota(group, name="owner", gpu_min_milli=4000)
    submit_whole_gpu_jobs(lender, 8, "l")
    services.run_cycle(group.pk)
    # when the owner asks for its 4 GPUs (one pod)
    services.submit_workload(
        tenant=owner.tenant, quota=owner, kind="job_pod", name="o",
        cpu_milli=1000, memory_mib=1024, gpu_count=4, gpu_milli=1000,
    )  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        report = services.run_cycle(group.pk)
    # then the four victims are requeued together and one cycle follows, not one per victim
    assert report.reclaimed == 4
    assert cycles_sent == [group.pk]
    assert Workload.objects.filter(quota=lender, pending_code="reclaimed").count() == 4


def test_a_cycle_that_read_a_full_batch_and_placed_runs_again_at_once(
    quota: Any, cycles_sent: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    submit_whole_gpu_jobs(quota, 3, "b")
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_cycle(quota.group_id, limit=2).placed == 2
    assert cycles_sent == [quota.group_id]
    # the last one fits in a batch: nothing more waits behind it, no cycle is asked for
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_cycle(quota.group_id, limit=2).placed == 1
    assert cycles_sent == [quota.group_id]
