"""Tasks, observers, reconcilers, inventory loading and the simulated backend."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from scheduling import observers, services, tasks
from scheduling.backends.base import BackendError, ObservedPhase, StatusReport
from scheduling.backends.registry import get_backend
from scheduling.choices import WorkloadState
from scheduling.inventory import (
    InventoryError,
    load_demo_inventory,
    load_openb_csv,
    sync_inventory_rows,
)
from scheduling.models import Gpu, Node, Placement, SimulatedPod, Workload
from scheduling.services import reconcile
from scheduling.tests.factories import make_group, make_quota, small_cluster
from scheduling.tests.traces import NODE_LIST, require_traces

pytestmark = pytest.mark.django_db


@pytest.fixture
def quota() -> Any:
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    return make_quota(make_group())


def submit(quota: Any, name: str, **kw: Any) -> Workload:
    return services.submit_workload(
        tenant=quota.tenant, quota=quota, kind=kw.pop("kind", "job_pod"), name=name,
        cpu_milli=1000, memory_mib=1024, **kw,
    )  # fmt: skip


def test_on_commit_chain_places_materializes_and_runs(
    quota: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given eager Celery: submit → cycle → materialize → (sync) running
    with django_capture_on_commit_callbacks(execute=True):
        w = submit(quota, "w", gpu_count=1, gpu_milli=500, gpu_memory_mib=1024)
    pod = SimulatedPod.objects.get(workload_id=w.pk)
    assert pod.node_name == Placement.objects.get(workload=w).node.name
    assert pod.name == f"pod-w-{w.pk}"
    summary = reconcile.sync_status()
    w.refresh_from_db()
    assert (summary.running, w.state) == (1, WorkloadState.RUNNING)
    assert w.started_at is not None


def test_simulated_pod_runs_only_after_the_delay(quota: Any, settings: Any) -> None:
    settings.TESSERA_SIM_START_DELAY_SECONDS = 60
    w = submit(quota, "w")
    services.run_cycle(quota.group_id)
    tasks.materialize_workloads_task([w.pk])
    assert get_backend().sync_status([w.pk])[0].phase == ObservedPhase.PENDING
    SimulatedPod.objects.update(running_after=timezone.now() - timedelta(seconds=1))
    assert get_backend().sync_status([w.pk])[0].phase == ObservedPhase.RUNNING


def test_materialize_is_idempotent_and_skips_what_is_not_placed(quota: Any) -> None:
    w = submit(quota, "w")
    assert tasks.materialize_workloads_task([w.pk]) == 0  # still pending
    services.run_cycle(quota.group_id)
    assert tasks.materialize_workloads_task([w.pk]) == 1
    assert tasks.materialize_workloads_task([w.pk]) == 1
    assert SimulatedPod.objects.count() == 1


def test_permanent_backend_error_fails_the_workload(quota: Any, monkeypatch: Any) -> None:
    w = submit(quota, "w")
    services.run_cycle(quota.group_id)

    def refuse(request: Any) -> None:
        raise BackendError("image not allowed", permanent=True)

    monkeypatch.setattr(get_backend(), "materialize", refuse)
    tasks.materialize_workloads_task([w.pk])
    w.refresh_from_db()
    assert w.state == WorkloadState.FAILED
    assert w.failure_reason == "The cluster refused it: image not allowed"
    assert not Placement.objects.filter(released_at__isnull=True).exists()


def test_transient_backend_error_is_retried(quota: Any, monkeypatch: Any) -> None:
    w = submit(quota, "w")
    services.run_cycle(quota.group_id)
    calls = []

    def flaky(request: Any) -> None:
        calls.append(request.workload_id)
        if len(calls) == 1:
            raise BackendError("apiserver timeout")

    monkeypatch.setattr(get_backend(), "materialize", flaky)
    from celery.exceptions import Retry

    with pytest.raises(Retry):  # a transient error asks Celery for a retry (not a failure)
        tasks.materialize_workloads_task.apply(args=([w.pk],))
    tasks.materialize_workloads_task([w.pk])  # the retry
    assert calls == [w.pk, w.pk]
    w.refresh_from_db()
    assert w.state == WorkloadState.PLACED


def test_observers_hear_state_changes_after_commit(
    quota: Any, django_capture_on_commit_callbacks: Any
) -> None:
    heard: list[list[int]] = []
    observers.register_workload_observer("codespace", heard.append)
    try:
        w = submit(quota, "cs", kind="codespace")
        services.run_cycle(quota.group_id)
        with django_capture_on_commit_callbacks(execute=True):
            services.release_workload(w.pk, reason="stopped")
        with django_capture_on_commit_callbacks(execute=True):
            submit(quota, "job")  # a job pod: codespace observers hear nothing of it
    finally:
        observers.unregister_workload_observer("codespace", heard.append)
    assert heard == [[w.pk]]


def test_status_reports_move_workloads(quota: Any) -> None:
    a, b, c, d = (submit(quota, n) for n in "abcd")
    services.run_cycle(quota.group_id)
    Workload.objects.filter(pk=c.pk).update(state=WorkloadState.RUNNING)
    reconcile.apply_status_reports(
        [
            StatusReport(a.pk, ObservedPhase.RUNNING),
            StatusReport(b.pk, ObservedPhase.FAILED, "OOMKilled"),
            StatusReport(c.pk, ObservedPhase.MISSING),
            StatusReport(d.pk, ObservedPhase.SUCCEEDED, "exit 0"),
        ]
    )
    states = dict(Workload.objects.values_list("name", "state"))
    assert states == {
        "a": WorkloadState.RUNNING,
        "b": WorkloadState.FAILED,
        "c": WorkloadState.PENDING,
        "d": WorkloadState.SUCCEEDED,
    }
    assert Placement.objects.filter(released_at__isnull=True).count() == 1


def test_reconciler_fixes_drift_both_ways(quota: Any) -> None:
    a = submit(quota, "a")
    b = submit(quota, "b")
    services.run_cycle(quota.group_id)
    Placement.objects.filter(workload=a).delete()  # active without placement
    Workload.objects.filter(pk=b.pk).update(state=WorkloadState.FAILED)  # placement of inactive
    result = tasks.reconcile_task()
    assert result == {
        "gangs_timed_out": 0,
        "gangs_failed": 0,
        "gangs_failed_ids": [],
        "requeued": 1,
        "closed_placements": 1,
        "drift_failed": 0,
        "drift_failed_ids": [],
    }
    a.refresh_from_db()
    assert a.state == WorkloadState.PENDING
    assert not Placement.objects.filter(released_at__isnull=True).exists()
    assert tasks.reconcile_task() == {
        "gangs_timed_out": 0,
        "gangs_failed": 0,
        "gangs_failed_ids": [],
        "requeued": 0,
        "closed_placements": 0,
        "drift_failed": 0,
        "drift_failed_ids": [],
    }


def test_fail_node_requeues_everything_on_it(quota: Any) -> None:
    ws = [submit(quota, f"w{i}", gpu_count=1, gpu_milli=1000) for i in range(6)]
    services.run_cycle(quota.group_id)
    node = Node.objects.get(name="training-g0")
    on_node = set(Placement.objects.filter(node=node).values_list("workload_id", flat=True))
    assert services.fail_node(node.pk) == sorted(on_node)
    pending = set(Workload.objects.filter(state="pending").values_list("pk", flat=True))
    assert pending == on_node
    assert len(ws) == 6
    services.run_cycle(quota.group_id)  # only 4 GPUs left: the 4 on g1 stay, 2 wait
    assert Workload.objects.filter(state="pending").count() == 2


def test_demo_inventory_has_two_pools_and_topology() -> None:
    inv = load_demo_inventory()
    assert len(inv) == 24
    pools = {dict(n.labels)["pool"] for n in inv}
    assert pools == {"training", "interactive"}
    models = {n.gpu_model for n in inv if n.gpus}
    assert models == {"H100", "A100", "L40S", "T4"}
    h100 = next(n for n in inv if n.name == "h100-00")
    assert [g.nvlink_group for g in h100.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g.numa_node for g in h100.gpus} == {0, 1}


def test_inventory_sync_is_idempotent_and_keeps_cordons() -> None:
    sync_inventory_rows(load_demo_inventory())
    Node.objects.filter(name="t4-00").update(cordoned=True)
    again = sync_inventory_rows(load_demo_inventory())
    assert not again.changed
    assert Node.objects.count() == 24
    assert Gpu.objects.count() == 120
    assert Node.objects.get(name="t4-00").cordoned is True


def test_openb_csv_loader(tmp_path: Path) -> None:
    f = tmp_path / "nodes.csv"
    f.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,8,V100M32\nn-1,32000,131072,0,\n"
    )
    inv = load_openb_csv(f)
    assert [(n.name, len(n.gpus), n.gpu_model) for n in inv] == [
        ("n-0", 8, "V100M32"),
        ("n-1", 0, ""),
    ]
    assert inv[0].gpus[0].memory_mib == 32768
    assert [g.numa_node for g in inv[0].gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    f.write_text("sn,cpu_milli,memory_mib,gpu,model\nn-0,lots,1,1,T4\n")
    with pytest.raises(InventoryError, match="nodes.csv:2"):
        load_openb_csv(f)


def test_openb_trace_file_loads_when_present() -> None:
    require_traces(NODE_LIST)
    inv = load_openb_csv(NODE_LIST)
    assert len(inv) == 1213
    assert sum(len(n.gpus) for n in inv) == 24 * 1 + 518 * 2 + 54 * 4 + 617 * 8


def test_seed_demo_loads_the_cluster_idempotently() -> None:
    import io

    from scheduling import demo

    out = io.StringIO()
    demo.seed(out)
    demo.seed(out)
    assert Node.objects.count() == 24
    assert "24 nodes, 120 GPUs" in out.getvalue()


def test_cycle_task_and_beat_fan_out(quota: Any) -> None:
    submit(quota, "w")
    assert tasks.run_cycle_task(quota.group_id)["placed"] == 1
    assert tasks.schedule_cycles_task() == 1


def test_queues_cover_every_group(settings: Any) -> None:
    from scheduling.queues import queue_for_group, shard_queues, worker_queues

    settings.TESSERA_SCHEDULING_QUEUES = 3
    assert shard_queues() == ["sched-0", "sched-1", "sched-2"]
    assert worker_queues() == ["default", "sched-0", "sched-1", "sched-2"]
    assert {queue_for_group(g) for g in range(10)} == set(shard_queues())
