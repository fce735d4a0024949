"""The scheduling service with a real Celery worker (subprocess) against Redis and the test database
(PostgreSQL in CI): concurrent submissions, gangs, a SIGKILLed worker, GPU failure, racing cycles."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Sum

from core.placement import explain
from scheduling import services, tasks
from scheduling.choices import ACTIVE_STATES, GangState, WorkloadState
from scheduling.lock_objects import SHARD_LOCK_CLASS
from scheduling.models import Gpu, Node, Placement, PlacementGpu, Workload
from scheduling.queues import worker_queues
from scheduling.services import snapshot as snap
from scheduling.tests.factories import load_demo, make_group, make_quota

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def wait_until(check: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def demo_quota() -> Any:
    load_demo()
    return make_quota(make_group("training"))


def mixed_requests(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """Slices, whole GPUs (1/2/4/8), CPU-only pods, and a few that can never fit (16 GPUs)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = rng.random()
        if i % 50 == 49:
            spec = {"gpu_count": 16, "gpu_milli": 1000}  # no node has 16 GPUs
        elif kind < 0.45:
            spec = {
                "gpu_count": 1,
                "gpu_milli": rng.choice([100, 250, 500]),
                "gpu_memory_mib": 4096,
            }
        elif kind < 0.8:
            spec = {"gpu_count": rng.choice([1, 1, 2, 4, 8]), "gpu_milli": 1000}
        else:
            spec = {}
        out.append({"cpu_milli": rng.choice([500, 2000, 8000]), "memory_mib": 4096, **spec})
    return out


def submit_concurrently(quota: Any, specs: list[dict[str, Any]], threads: int = 8) -> None:
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run(chunk: list[tuple[int, dict[str, Any]]]) -> None:
        try:
            barrier.wait()
            for i, spec in chunk:
                services.submit_workload(
                    tenant=quota.tenant, quota=quota, kind="job_pod", name=f"w{i}", **spec
                )
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    items = list(enumerate(specs))
    workers = [threading.Thread(target=run, args=(items[k::threads],)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors


def submit_many(quota: Any, specs: list[dict[str, Any]]) -> None:
    for i, spec in enumerate(specs):
        services.submit_workload(
            tenant=quota.tenant, quota=quota, kind="job_pod", name=f"r{i}", **spec
        )


def settled() -> bool:
    """Every workload has been through a cycle: placed, or waiting with a reason of a cycle."""
    return not Workload.objects.filter(state=WorkloadState.PENDING, pending_code="queued").exists()


def assert_invariants() -> None:
    """No GPU or node over-committed, no workload with two active placements, states and placements agree."""
    for row in (
        PlacementGpu.objects.filter(placement__released_at__isnull=True)
        .values("gpu_id")
        .annotate(m=Sum("gpu_milli"), mem=Sum("gpu_memory_mib"))
    ):
        gpu = Gpu.objects.get(pk=row["gpu_id"])
        assert row["m"] <= 1000, f"GPU {gpu} over-committed: {row['m']} milli"
        assert row["mem"] <= gpu.memory_mib, f"GPU {gpu} memory over-committed"
    for row in (
        Placement.objects.filter(released_at__isnull=True)
        .values("node_id")
        .annotate(c=Sum("cpu_milli"), m=Sum("memory_mib"))
    ):
        node = Node.objects.get(pk=row["node_id"])
        assert row["c"] <= node.cpu_milli, f"{node} CPU over-committed"
        assert row["m"] <= node.memory_mib, f"{node} memory over-committed"
    doubles = (
        Placement.objects.filter(released_at__isnull=True)
        .values("workload_id")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
    )
    assert not doubles.exists()
    active = set(Workload.objects.filter(state__in=ACTIVE_STATES).values_list("pk", flat=True))
    placed = set(
        Placement.objects.filter(released_at__isnull=True).values_list("workload_id", flat=True)
    )
    assert active == placed


def assert_everything_placeable_is_placed(quota: Any) -> None:
    """No waiting workload fits the cluster as it is now, unless the quota holds it back; every waiting
    one has a reason and a queue position."""
    snap.forget()
    cluster = snap.build_group_cluster(quota.group, -1)
    waiting = list(Workload.objects.filter(state=WorkloadState.PENDING))
    for w in waiting:
        assert w.pending_reason, w
        assert w.pending_code != "queued", w
        assert w.queue_position is not None
        if w.pending_code.startswith("quota") or w.pending_code in ("exceeds_capacity",):
            continue
        assert explain(cluster.state, snap.workload_request(w)) is not None, (
            f"{w} could be placed now but waits: {w.pending_reason}"
        )


def test_500_concurrent_submissions_place_safely(start_celery_worker: Any) -> None:
    # given the demo training pool (80 GPUs) and a real worker
    quota = demo_quota()
    start_celery_worker(queues=worker_queues(), concurrency=2)
    # when 500 workloads are submitted from 8 threads at once
    submit_concurrently(quota, mixed_requests(500))
    assert Workload.objects.count() == 500
    wait_until(settled, 90, "every submission to go through a cycle")
    # then: no over-commit, no double placement, everything placeable placed, the rest say why
    assert_invariants()
    assert_everything_placeable_is_placed(quota)
    never = Workload.objects.filter(gpu_count=16)
    assert never.count() == 10
    assert set(never.values_list("state", flat=True)) == {WorkloadState.PENDING}
    assert Workload.objects.filter(state__in=ACTIVE_STATES).count() > 100


def test_gang_that_cannot_fit_holds_nothing_then_times_out(start_celery_worker: Any) -> None:
    quota = demo_quota()
    start_celery_worker(queues=worker_queues(), concurrency=2)
    # 11 pods × 5 whole GPUs: within quota (55 of 80 GPUs) but only 10 nodes can host a 5-GPU pod
    member = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 5, "gpu_milli": 1000}
    gang = services.submit_gang(
        tenant=quota.tenant, quota=quota, name="wide", owner=None, members=[member] * 11,
        min_available=11, timeout_seconds=4,
    )  # fmt: skip
    wait_until(
        lambda: not gang.members.filter(pending_code="queued").exists(), 60, "the gang's cycle"
    )
    assert not Placement.objects.exists()
    codes = set(gang.members.values_list("pending_code", flat=True))
    assert codes == {"gang_incomplete"}
    time.sleep(4.5)
    tasks.reconcile_task.delay().get(timeout=60)  # what beat does
    gang.refresh_from_db()
    assert gang.state == GangState.TIMED_OUT
    members = list(gang.members.all())
    assert {m.state for m in members} == {WorkloadState.FAILED}
    assert all(
        m.pending_reason.startswith("Job wide timed out after 4 s: it needs 11 of 11 pods")
        for m in members
    )
    assert not Placement.objects.filter(released_at__isnull=True).exists()


def advisory_lock_held() -> bool:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND granted",
            [SHARD_LOCK_CLASS],
        )
        return bool(cur.fetchone()[0])


@pytest.mark.xfail(
    strict=False,
    reason=(
        "quarantined (issue 38): passes alone and shuffled within this file, but failed in two full "
        "PostgreSQL runs of main after the cycle triggers became sweeps (h/chaos) and the restarted "
        "worker's takeover moved to its start; the cause is not found yet"
    ),
)
def test_sigkill_mid_cycle_loses_nothing_and_duplicates_nothing(start_celery_worker: Any) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL to see the cycle's advisory lock (pg_locks)")
    quota = demo_quota()
    # submissions queue up before any worker runs
    submit_concurrently(quota, mixed_requests(400, seed=11), threads=4)
    worker = start_celery_worker(queues=worker_queues(), concurrency=1)
    deadline = time.monotonic() + 30
    while not advisory_lock_held():
        assert time.monotonic() < deadline, "no cycle started"
        time.sleep(0.002)
    worker.kill()  # SIGKILL in the middle of a cycle: its transaction dies with the connection
    assert Workload.objects.count() == 400
    assert_invariants()
    worker.start()
    tasks.schedule_cycles_task.delay()  # what beat does every few seconds
    wait_until(settled, 90, "the cycles after the restart")
    assert Workload.objects.count() == 400
    assert_invariants()
    assert_everything_placeable_is_placed(quota)


def test_failed_gpu_requeues_exactly_its_workloads(start_celery_worker: Any) -> None:
    quota = demo_quota()
    start_celery_worker(queues=worker_queues(), concurrency=2)
    for i in range(40):
        services.submit_workload(
            tenant=quota.tenant, quota=quota, kind="job_pod", name=f"s{i}",
            cpu_milli=500, memory_mib=1024, gpu_count=1, gpu_milli=250, gpu_memory_mib=1024,
        )  # fmt: skip
    wait_until(settled, 60, "placement")
    wait_until(
        lambda: (
            not Workload.objects.filter(state=WorkloadState.PLACED).exists()
            or tasks.sync_status_task.delay().get(timeout=30) is None
        ),
        30,
        "running",
    )
    busiest = (
        PlacementGpu.objects.filter(placement__released_at__isnull=True)
        .values("gpu_id")
        .annotate(n=Count("pk"))
        .order_by("-n", "gpu_id")
        .first()
    )
    assert busiest is not None
    assert busiest["n"] >= 2
    gpu_id = busiest["gpu_id"]
    on_it = set(
        Placement.objects.filter(released_at__isnull=True, gpu_shares__gpu_id=gpu_id).values_list(
            "workload_id", flat=True
        )
    )
    others = (
        set(Workload.objects.filter(state__in=ACTIVE_STATES).values_list("pk", flat=True)) - on_it
    )
    requeued = services.fail_gpu(gpu_id)
    assert set(requeued) == on_it
    # the others keep their placements; the requeued ones are placed again elsewhere by the worker
    assert (
        set(
            Workload.objects.filter(pk__in=others, state__in=ACTIVE_STATES).values_list(
                "pk", flat=True
            )
        )
        == others
    )
    wait_until(
        lambda: (
            Workload.objects.filter(pk__in=on_it, state__in=ACTIVE_STATES).count() == len(on_it)
        ),
        60,
        "the requeued workloads to be placed again",
    )
    assert not PlacementGpu.objects.filter(
        gpu_id=gpu_id, placement__released_at__isnull=True
    ).exists()
    assert_invariants()


@pytest.mark.parametrize("_case", ["with the shard lock", "without the shard lock"])
def test_racing_cycles_never_double_place(_case: str, monkeypatch: Any) -> None:
    quota = demo_quota()
    with monkeypatch.context() as m:  # queue them without triggering (eager) cycles
        m.setattr("scheduling.services.workloads.trigger_cycle", lambda group_id: None)
        submit_many(quota, mixed_requests(200, seed=3))
    # the race is about placements; backend calls after commit are covered by the worker tests
    monkeypatch.setattr("scheduling.services.cycle._materialize_on_commit", lambda ids: None)
    if _case == "without the shard lock":
        # prove the database guards alone (CAS, node row locks + re-check, unique constraint) suffice
        monkeypatch.setattr("scheduling.services.cycle.lock_shard", lambda group_id: None)
    barrier = threading.Barrier(4)
    reports: list[Any] = []

    errors: list[BaseException] = []

    def race() -> None:
        try:
            barrier.wait()
            snap.forget()
            reports.append(services.run_cycle(quota.group_id))
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=race) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(reports) == 4
    placed = Placement.objects.filter(released_at__isnull=True).count()
    assert sum(r.placed for r in reports) == placed > 0
    assert_invariants()


def test_database_refuses_a_second_active_placement(monkeypatch: Any) -> None:
    quota = demo_quota()
    monkeypatch.setattr("scheduling.services.workloads.trigger_cycle", lambda group_id: None)
    w = services.submit_workload(
        tenant=quota.tenant, quota=quota, kind="job_pod", name="w", cpu_milli=1, memory_mib=1
    )
    node = Node.objects.first()
    Placement.objects.create(workload=w, node=node, tenant=quota.tenant, cpu_milli=1, memory_mib=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Placement.objects.create(
            workload=w, node=node, tenant=quota.tenant, cpu_milli=1, memory_mib=1
        )
