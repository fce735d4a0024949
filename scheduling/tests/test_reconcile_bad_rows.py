"""The set-based reconcilers survive one bad row (docs/adr/0004, issue 38): a row the database refuses
inside a statement over many is logged with its id and counted, and every other row is still fixed."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from portal.periodic import ItemFailures
from portal.tests.refused_rows import refused_rows
from scheduling import services, tasks
from scheduling.backends.base import GpuInventory, NodeInventory
from scheduling.choices import WorkloadState
from scheduling.models import Node, Placement, SimulatedPod, Workload
from scheduling.services import reconcile
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def quota() -> Any:
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    return make_quota(make_group())


def placed(quota: Any, *names: str) -> list[Workload]:
    workloads = [
        services.submit_workload(
            tenant=quota.tenant, quota=quota, kind="job_pod", name=name,
            cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=500, gpu_memory_mib=1024,
        )
        for name in names
    ]  # fmt: skip
    services.run_cycle(quota.group_id)
    assert {w.state for w in Workload.objects.filter(pk__in=[w.pk for w in workloads])} == {
        WorkloadState.PLACED
    }
    return workloads


def messages(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_reconcile_requeues_every_orphan_but_the_one_the_database_refuses(
    quota: Any, caplog: Any
) -> None:
    # given three placed workloads whose placements were lost (active without a placement)
    first, bad, last = placed(quota, "a", "b", "c")
    Placement.objects.update(released_at=timezone.now())
    failures = ItemFailures()
    # when the database refuses to move the second one
    with refused_rows("scheduling_workload", "UPDATE", f"OLD.id = {bad.pk}"):
        with caplog.at_level(logging.WARNING, logger="tessera.periodic"):
            report = reconcile.reconcile_placements(failures=failures)
    # then the other two are requeued, and the bad one is counted and logged by id
    assert report.active_without_placement == (first.pk, last.pk)
    states = dict(Workload.objects.values_list("pk", "state"))
    assert states == {
        first.pk: WorkloadState.PENDING,
        bad.pk: WorkloadState.PLACED,
        last.pk: WorkloadState.PENDING,
    }
    assert failures.as_dict() == {"done": 2, "failed": 1, "failed_ids": [bad.pk]}
    assert messages(caplog) == [f"reconcile: workload {bad.pk} failed"]


def test_reconcile_closes_every_stale_placement_but_the_one_the_database_refuses(
    quota: Any,
) -> None:
    # given three placed workloads that ended without their placements closing
    workloads = placed(quota, "a", "b", "c")
    Workload.objects.update(state=WorkloadState.SUCCEEDED)
    bad = Placement.objects.get(workload=workloads[1])
    # when the database refuses to close the second placement
    with refused_rows("scheduling_placement", "UPDATE", f"OLD.id = {bad.pk}"):
        result = tasks.reconcile_task()
    # then the other two are closed and the task's result names the refused one
    still_open = set(
        Placement.objects.filter(released_at__isnull=True).values_list("pk", flat=True)
    )
    assert still_open == {bad.pk}
    assert (result["closed_placements"], result["drift_failed"], result["drift_failed_ids"]) == (
        2, 1, [bad.pk]
    )  # fmt: skip


def test_status_sync_marks_every_running_pod_but_the_one_the_database_refuses(
    quota: Any, caplog: Any
) -> None:
    # given three placed workloads whose pods run
    first, bad, last = placed(quota, "a", "b", "c")
    tasks.materialize_workloads_task([first.pk, bad.pk, last.pk])
    SimulatedPod.objects.update(running_after=timezone.now() - timedelta(seconds=1))
    # when the database refuses to move the second one
    with refused_rows("scheduling_workload", "UPDATE", f"OLD.id = {bad.pk}"):
        with caplog.at_level(logging.WARNING, logger="tessera.periodic"):
            result = tasks.sync_status_task()
    # then the other two are running, and the bad one is counted and logged by id
    states = dict(Workload.objects.values_list("pk", "state"))
    assert states == {
        first.pk: WorkloadState.RUNNING,
        bad.pk: WorkloadState.PLACED,
        last.pk: WorkloadState.RUNNING,
    }
    assert (result["running"], result["failed_reports"], result["failed_ids"]) == (2, 1, [bad.pk])
    assert messages(caplog) == [f"status sync: workload {bad.pk} failed"]


def test_inventory_sync_upserts_every_node_but_the_one_the_database_refuses(
    monkeypatch: Any, caplog: Any
) -> None:
    # given an inventory of three nodes, the second of which the database refuses
    inventory = [
        NodeInventory(
            name, cpu_milli=32000, memory_mib=262144, gpu_model="A100",
            labels=(("pool", "training"),),
            gpus=(GpuInventory(0, f"GPU-{name}-0", "A100", 81920),),
        )
        for name in ("n-a", "n-bad", "n-c")
    ]  # fmt: skip

    class Backend:
        def sync_inventory(self) -> list[NodeInventory]:
            return inventory

    monkeypatch.setattr(reconcile, "get_backend", Backend)
    # when
    with refused_rows("scheduling_node", "INSERT", "NEW.name = 'n-bad'"):
        with caplog.at_level(logging.WARNING, logger="tessera.periodic"):
            result = tasks.sync_inventory_task()
    # then the other two nodes (and their GPUs) are there, the refused one is named
    assert sorted(Node.objects.values_list("name", flat=True)) == ["n-a", "n-c"]
    assert sorted(Node.objects.filter(gpus__isnull=False).values_list("name", flat=True)) == [
        "n-a",
        "n-c",
    ]
    assert (result["created_nodes"], result["failed_nodes"], result["failed_ids"]) == (
        2, 1, ["n-bad"]
    )  # fmt: skip
    assert messages(caplog) == ["inventory sync: node n-bad failed"]


def test_reconcile_removes_the_pod_of_a_stale_placement_it_closes(
    quota: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a workload that ended without its placement closing, whose pod still runs
    (ended,) = placed(quota, "a")
    tasks.materialize_workloads_task([ended.pk])
    Workload.objects.filter(pk=ended.pk).update(state=WorkloadState.FAILED)
    # when the reconciler closes the placement
    with django_capture_on_commit_callbacks(execute=True):
        result = tasks.reconcile_task()
    # then the backend is told too: no pod outlives the placement (the audit's backend_objects)
    assert result["closed_placements"] == 1
    assert SimulatedPod.objects.filter(workload_id=ended.pk).exists() is False
