"""Backend objects never outlive their placement (issue item 6): a release is keyed by placement, so a
stale release cannot delete the object of the workload's next placement; materialize does not leave an
object behind for a placement released while it ran; the orphan reconciler removes what has no active
placement and re-materializes (or requeues) active placements without an object."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from scheduling import services, tasks
from scheduling.backends.base import BackendError, MaterializeRequest
from scheduling.backends.simulated.backend import SimulatedBackend
from scheduling.choices import WorkloadState
from scheduling.models import Placement, SimulatedPod, Workload
from scheduling.services import reconcile
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def quota() -> Any:
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    return make_quota(make_group())


def placed(quota: Any, name: str) -> tuple[Workload, Placement]:
    """A workload placed by a cycle and materialized (its simulated pod exists)."""
    w = services.submit_workload(
        tenant=quota.tenant, quota=quota, kind="job_pod", name=name,
        cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=500, gpu_memory_mib=1024,
    )  # fmt: skip
    services.run_cycle(quota.group_id)
    assert tasks.materialize_workloads_task([w.pk]) == 1
    return w, Placement.objects.get(workload=w, released_at__isnull=True)


def test_a_stale_release_keeps_the_pod_of_the_workloads_next_placement(
    quota: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a workload requeued (its release is queued but has not run yet) ...
    w, first = placed(quota, "w")
    with django_capture_on_commit_callbacks() as stale_release:
        services.requeue_workloads([w.pk], reason="Requeued: test.", code="test")
    # ... and placed again and materialized before the stale release runs
    services.run_cycle(quota.group_id)
    second = Placement.objects.get(workload=w, released_at__isnull=True)
    assert second.pk != first.pk
    assert tasks.materialize_workloads_task([w.pk]) == 1
    # when the first placement's release finally runs
    for callback in stale_release:
        callback()
    # then the pod of the second placement is still there
    pod = SimulatedPod.objects.get(workload_id=w.pk)
    assert pod.placement_id == second.pk
    assert pod.node_name == second.node.name


def test_the_release_of_a_placement_removes_its_pod(quota: Any) -> None:
    w, first = placed(quota, "w")
    tasks.release_backend_task(w.pk, services.backend_name(w), placement_id=first.pk)
    assert SimulatedPod.objects.filter(workload_id=w.pk).exists() is False


def test_materialize_leaves_no_pod_for_a_placement_released_while_it_ran(
    quota: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given the materialize task read a placed workload and its placement ...
    w = services.submit_workload(
        tenant=quota.tenant, quota=quota, kind="job_pod", name="w",
        cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=500, gpu_memory_mib=1024,
    )  # fmt: skip
    services.run_cycle(quota.group_id)
    [(read_workload, read_placement)] = reconcile.placed_with_placement([w.pk])
    # ... when the workload is released (its backend release runs and finds nothing yet)
    with django_capture_on_commit_callbacks(execute=True):
        services.release_workload(w.pk, reason="Stopped by its owner.")
    # and only then the materialize reaches the backend with what it read
    created = reconcile.materialize_placement(read_workload, read_placement)
    # then no pod is left for the released placement
    assert created is False
    assert SimulatedPod.objects.filter(workload_id=w.pk).exists() is False


def test_orphan_reconciler_removes_pods_without_an_active_placement(quota: Any) -> None:
    # given a pod whose workload was released while its release was lost, and one of a deleted row
    w, _ = placed(quota, "w")
    Placement.objects.filter(workload=w).update(released_at=w.submitted_at)
    Workload.objects.filter(pk=w.pk).update(state=WorkloadState.RELEASED)
    SimulatedPod.objects.create(
        workload_id=999_999, placement_id=999_999, name="pod-gone-999999", node_name="n0",
        running_after=w.submitted_at,
    )  # fmt: skip
    keep, _ = placed(quota, "keep")
    # when the orphan reconciler runs
    report = reconcile.reconcile_backend_orphans()
    # then exactly the two orphans are gone, the active placement's pod stays
    assert sorted(report.removed) == sorted([services.backend_name(w), "pod-gone-999999"])
    assert (report.rematerialized, report.requeued) == ((), ())
    assert list(SimulatedPod.objects.values_list("workload_id", flat=True)) == [keep.pk]
    assert tasks.reconcile_backend_orphans_task() == {
        "deleted_orphans": 0,
        "rematerialized": 0,
        "requeued": 0,
    }


def test_orphan_reconciler_rematerializes_a_placed_workload_without_a_pod_and_requeues_a_running_one(
    quota: Any,
) -> None:
    # given a placed workload whose pod is gone and a running one whose pod is gone
    placed_w, placed_p = placed(quota, "placed")
    running_w, _ = placed(quota, "running")
    Workload.objects.filter(pk=running_w.pk).update(state=WorkloadState.RUNNING)
    SimulatedPod.objects.all().delete()
    # when the orphan reconciler runs (beat's task)
    result = tasks.reconcile_backend_orphans_task()
    # then the placed one is materialized again on its placement, the running one requeued
    assert result == {"deleted_orphans": 0, "rematerialized": 1, "requeued": 1}
    pod = SimulatedPod.objects.get(workload_id=placed_w.pk)
    assert pod.placement_id == placed_p.pk
    running_w.refresh_from_db()
    assert (running_w.state, running_w.pending_code) == (WorkloadState.PENDING, "pod_missing")


class ReleasedDuringCreate(SimulatedBackend):
    """The simulated cluster, where another process releases the workload (and runs its release
    task, which finds no pod yet) after materialize checked the placement and before the pod is
    created."""

    def __init__(self, capture: Any) -> None:
        self.capture = capture

    def materialize(self, request: MaterializeRequest) -> None:
        with self.capture(execute=True):
            services.release_workload(request.workload_id, reason="Stopped by its owner.")
        assert SimulatedPod.objects.filter(workload_id=request.workload_id).exists() is False
        super().materialize(request)


def test_materialize_removes_the_pod_of_a_placement_released_during_the_create(
    quota: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a placed workload
    w = services.submit_workload(
        tenant=quota.tenant, quota=quota, kind="job_pod", name="w",
        cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=500, gpu_memory_mib=1024,
    )  # fmt: skip
    services.run_cycle(quota.group_id)
    [(read_workload, read_placement)] = reconcile.placed_with_placement([w.pk])
    # when it is released while its pod is being created (the release finds no pod yet)
    backend = ReleasedDuringCreate(django_capture_on_commit_callbacks)
    created = reconcile.materialize_placement(read_workload, read_placement, backend)
    # then materialize sees the placement closed and removes the pod it made
    assert created is False
    assert SimulatedPod.objects.filter(workload_id=w.pk).exists() is False
    w.refresh_from_db()
    assert w.state == WorkloadState.RELEASED


class RefusesOneRelease(SimulatedBackend):
    """The simulated cluster, refusing to delete one named object."""

    def __init__(self, refused: str) -> None:
        self.refused = refused

    def release(self, workload_id: int, name: str, **kwargs: Any) -> None:
        if name == self.refused:
            raise BackendError(f"{name}: forbidden", permanent=True)
        super().release(workload_id, name, **kwargs)


def test_orphan_reconciler_goes_on_past_an_object_it_cannot_delete(
    quota: Any, monkeypatch: Any
) -> None:
    for workload_id in (999_998, 999_999):
        SimulatedPod.objects.create(
            workload_id=workload_id, placement_id=workload_id, name=f"pod-gone-{workload_id}",
            node_name="n0", running_after=timezone.now(),
        )  # fmt: skip
    monkeypatch.setattr(reconcile, "get_backend", lambda: RefusesOneRelease("pod-gone-999998"))

    report = reconcile.reconcile_backend_orphans()

    assert report.removed == ("pod-gone-999999",)
    assert list(SimulatedPod.objects.values_list("name", flat=True)) == ["pod-gone-999998"]
