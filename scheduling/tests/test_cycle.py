"""The scheduling cycle: placement, persistence, reasons, queue positions, gangs, over-commit guards."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Sum

from portal.errors import InvalidInput
from quotas.models import QuotaGroup
from scheduling import services
from scheduling.choices import GangState, WorkloadState
from scheduling.models import Gang, Gpu, Placement, PlacementGpu, Shard, Workload
from scheduling.services import snapshot as snap
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db


def submit(quota: Any, name: str, **kw: Any) -> Workload:
    kw.setdefault("cpu_milli", 1000)
    kw.setdefault("memory_mib", 1024)
    return services.submit_workload(
        tenant=quota.tenant, quota=quota, kind=kw.pop("kind", "job_pod"), name=name, **kw
    )


def assert_no_overcommit() -> None:
    for gpu in Gpu.objects.all():
        agg = PlacementGpu.objects.filter(gpu=gpu, placement__released_at__isnull=True).aggregate(
            m=Sum("gpu_milli"), mem=Sum("gpu_memory_mib")
        )
        assert (agg["m"] or 0) <= 1000
        assert (agg["mem"] or 0) <= gpu.memory_mib
    for p in (
        Placement.objects.filter(released_at__isnull=True)
        .values("node_id")
        .annotate(c=Sum("cpu_milli"), m=Sum("memory_mib"))
    ):
        from scheduling.models import Node

        node = Node.objects.get(pk=p["node_id"])
        assert p["c"] <= node.cpu_milli
        assert p["m"] <= node.memory_mib


def test_submit_places_on_commit_with_gpu_shares(django_capture_on_commit_callbacks: Any) -> None:
    # given a 2-node A100 pool and a quota
    small_cluster()
    q = make_quota(make_group())
    # when a slice is submitted and the on-commit cycle runs
    with django_capture_on_commit_callbacks(execute=True):
        w = submit(q, "nb", gpu_count=1, gpu_milli=250, gpu_memory_mib=10240)
    # then it is placed on one GPU with exactly that share, and the simulated pod runs (delay 0)
    w.refresh_from_db()
    assert w.state in (WorkloadState.PLACED, WorkloadState.RUNNING)
    p = Placement.objects.get(workload=w, released_at__isnull=True)
    shares = list(p.gpu_shares.values_list("gpu_milli", "gpu_memory_mib"))
    assert shares == [(250, 10240)]
    assert p.gpu_milli_total == 250
    assert w.pending_reason == ""
    assert w.queue_position is None
    assert Shard.objects.get(group=q.group).last_cycle_placed == 1


def test_cycle_records_reason_and_queue_position_for_what_cannot_fit() -> None:
    # given two nodes with 4 whole GPUs each
    small_cluster(gpu_nodes=2)
    q = make_quota(make_group())
    a = submit(q, "a", gpu_count=3, gpu_milli=1000)
    b = submit(q, "b", gpu_count=3, gpu_milli=1000)
    c = submit(q, "c", gpu_count=2, gpu_milli=1000)
    d = submit(q, "d", gpu_count=4, gpu_milli=1000)
    # when a cycle runs
    report = services.run_cycle(q.group_id)
    # then a and b are placed (one per node); c and d wait with positions 1 and 2 and reasons
    assert (report.placed, report.waiting) == (2, 2)
    for w in (a, b, c, d):
        w.refresh_from_db()
    assert (a.state, b.state) == (WorkloadState.PLACED, WorkloadState.PLACED)
    assert (c.state, c.queue_position, d.queue_position) == (WorkloadState.PENDING, 1, 2)
    assert c.pending_code == "insufficient_gpu"
    assert c.pending_reason.startswith(
        "No node of 2 can host 1000m CPU, 1024 MiB memory, 2 whole GPUs"
    )
    assert d.pending_code == "quota_runtime"
    assert "in use" in d.pending_reason


def test_release_frees_capacity_and_next_cycle_places_the_waiting() -> None:
    small_cluster(gpu_nodes=1)
    q = make_quota(make_group())
    a = submit(q, "a", gpu_count=4, gpu_milli=1000)
    b = submit(q, "b", gpu_count=4, gpu_milli=1000)
    services.run_cycle(q.group_id)
    v = Shard.objects.get(group=q.group).version
    services.release_workload(a.pk, reason="done")
    assert Shard.objects.get(group=q.group).version > v  # snapshot invalidated
    report = services.run_cycle(q.group_id)
    assert report.placed == 1
    assert not report.snapshot_cached
    b.refresh_from_db()
    a.refresh_from_db()
    assert (a.state, b.state) == (WorkloadState.RELEASED, WorkloadState.PLACED)
    assert a.placements.get().released_at is not None
    # idempotent
    assert services.release_workload(a.pk, reason="again").state == WorkloadState.RELEASED


def test_rerunning_a_cycle_places_nothing_twice() -> None:
    small_cluster()
    q = make_quota(make_group())
    ws = [submit(q, f"w{i}", gpu_count=1, gpu_milli=500, gpu_memory_mib=1024) for i in range(10)]
    first = services.run_cycle(q.group_id)
    second = services.run_cycle(q.group_id)
    assert (first.placed, second.placed, second.considered) == (10, 0, 0)
    assert Placement.objects.filter(released_at__isnull=True).count() == len(ws)
    assert_no_overcommit()


def test_cached_snapshot_is_reused_and_kept_in_step() -> None:
    small_cluster()
    q = make_quota(make_group())
    submit(q, "a", gpu_count=1, gpu_milli=1000)
    services.run_cycle(q.group_id)
    submit(q, "b", gpu_count=1, gpu_milli=1000)
    report = services.run_cycle(q.group_id)
    assert report.snapshot_cached
    assert report.placed == 1
    cluster = services.snapshot_for_group(q.group)
    fresh = snap.build_group_cluster(q.group, cluster.version)
    assert cluster.state.gpu_free.tolist() == fresh.state.gpu_free.tolist()
    assert cluster.state.cpu_free.tolist() == fresh.state.cpu_free.tolist()


def test_stale_snapshot_is_caught_by_the_database_check() -> None:
    # given a cached snapshot, and a placement written behind its back (no version bump) by another
    # shard whose selector overlaps this one's nodes
    small_cluster(gpu_nodes=1, gpus_per_node=1)
    q = make_quota(make_group())
    other = make_quota(make_group("everything", {}))
    services.snapshot_for_group(q.group)
    intruder = submit(other, "intruder", gpu_count=1, gpu_milli=1000)
    gpu = Gpu.objects.get()
    Workload.objects.filter(pk=intruder.pk).update(state=WorkloadState.PLACED)
    p = Placement.objects.create(
        workload=intruder, node=gpu.node, tenant=q.tenant, cpu_milli=1000, memory_mib=1024
    )
    PlacementGpu.objects.create(placement=p, gpu=gpu, gpu_milli=1000, gpu_memory_mib=gpu.memory_mib)
    w = submit(q, "w", gpu_count=1, gpu_milli=1000)
    # when the cycle plans on its stale snapshot
    report = services.run_cycle(q.group_id)
    # then the database re-check rolls it back, the retry on a fresh snapshot places nothing
    assert report.retried
    assert report.placed == 0
    w.refresh_from_db()
    assert w.state == WorkloadState.PENDING
    assert_no_overcommit()


def test_gang_that_cannot_fit_holds_nothing_and_every_member_says_why() -> None:
    # given 2 nodes × 4 GPUs with 2 GPUs of one node taken
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    q = make_quota(make_group())
    submit(q, "blocker", gpu_count=2, gpu_milli=1000)
    services.run_cycle(q.group_id)
    # when a gang of 2 × 3 GPUs (quota allows: 2 + 6 of 8) is scheduled
    member = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 3, "gpu_milli": 1000}
    gang = services.submit_gang(
        tenant=q.tenant, quota=q, name="train", owner=None, members=[member] * 2,
        min_available=2, timeout_seconds=60,
    )  # fmt: skip
    report = services.run_cycle(q.group_id)
    # then nothing of it is placed (one member alone would fit) and both members say why
    assert report.placed == 0
    assert Placement.objects.filter(released_at__isnull=True).count() == 1
    members = list(gang.members.order_by("pk"))
    assert [m.state for m in members] == [WorkloadState.PENDING] * 2
    assert [m.pending_code for m in members] == ["gang_incomplete"] * 2
    assert all(
        "Gang train needs 2 of 2 members placed, only 1 fit" in m.pending_reason for m in members
    )
    assert [m.queue_position for m in members] == [1, 2]


def test_gang_places_all_members_together() -> None:
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    q = make_quota(make_group())
    member = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 4, "gpu_milli": 1000}
    gang = services.submit_gang(
        tenant=q.tenant, quota=q, name="t", owner=None, members=[member] * 2,
        min_available=2, timeout_seconds=60,
    )  # fmt: skip
    services.run_cycle(q.group_id)
    gang.refresh_from_db()
    assert gang.state == GangState.PLACED
    assert set(gang.members.values_list("state", flat=True)) == {WorkloadState.PLACED}
    nodes = set(Placement.objects.values_list("node__name", flat=True))
    assert nodes == {"training-g0", "training-g1"}


def test_a_gang_whose_timeout_raises_does_not_stop_the_others(monkeypatch: Any) -> None:
    # issue 9: one bad row must not stop a periodic task
    import time_machine
    from django.utils import timezone

    from scheduling.services import workloads
    from scheduling.tasks import reconcile_task

    small_cluster(gpu_nodes=1, gpus_per_node=4)
    # the pool has the 4 GPUs the job needs (so it may wait), but one is broken (so it never places)
    Gpu.objects.filter(index=3).update(healthy=False)
    q = make_quota(make_group())
    member = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 2, "gpu_milli": 1000}
    gangs = [
        services.submit_gang(
            tenant=q.tenant,
            quota=q,
            name=name,
            owner=None,
            members=[member] * 2,
            min_available=2,
            timeout_seconds=30,
        )  # fmt: skip
        for name in ("first", "second")
    ]
    services.run_cycle(q.group_id)
    original = workloads._expire_gang

    def flaky(gang_id: int, group_id: int, now: Any) -> bool:
        if gang_id == gangs[0].pk:
            raise OverflowError("date value out of range")
        return original(gang_id, group_id, now)

    monkeypatch.setattr(workloads, "_expire_gang", flaky)
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=31)):
        result = reconcile_task()
    assert (result["gangs_timed_out"], result["gangs_failed_ids"]) == (1, [gangs[0].pk])
    states = dict(Gang.objects.values_list("name", "state"))
    assert states == {"first": GangState.WAITING, "second": GangState.TIMED_OUT}


def test_gang_timeout_fails_members_with_reason() -> None:
    import time_machine
    from django.utils import timezone

    small_cluster(gpu_nodes=1, gpus_per_node=4)
    # the pool has the 4 GPUs the job needs (so it may wait), but one is broken (so it never places)
    Gpu.objects.filter(index=3).update(healthy=False)
    q = make_quota(make_group())
    member = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 2, "gpu_milli": 1000}
    gang = services.submit_gang(
        tenant=q.tenant, quota=q, name="big", owner=None, members=[member] * 2,
        min_available=2, timeout_seconds=30,
    )  # fmt: skip
    services.run_cycle(q.group_id)
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=31)):
        assert services.expire_gangs() == [gang.pk]
    gang.refresh_from_db()
    assert gang.state == GangState.TIMED_OUT
    members = list(gang.members.all())
    assert {m.state for m in members} == {WorkloadState.FAILED}
    assert all(m.pending_reason.startswith("Job big timed out after 30 s") for m in members)
    assert all(
        "gang_incomplete" == m.pending_code or m.pending_code == "gang_timeout" for m in members
    )
    assert not Placement.objects.filter(released_at__isnull=True).exists()


def test_cpu_only_work_avoids_gpu_nodes_and_respects_reservation() -> None:
    small_cluster(gpu_nodes=1, cpu_nodes=1, cpu_milli=32000)
    q = make_quota(make_group())
    w = submit(q, "cpu", cpu_milli=4000)
    services.run_cycle(q.group_id)
    assert Placement.objects.get(workload=w).node.name == "training-c0"
    # fill the CPU node; then CPU-only work may use at most 75% of the GPU node
    big = submit(q, "big", cpu_milli=28000)
    services.run_cycle(q.group_id)
    assert Placement.objects.get(workload=big).node.name == "training-c0"
    too_big = submit(q, "too-big", cpu_milli=25000)
    services.run_cycle(q.group_id)
    too_big.refresh_from_db()
    assert too_big.state == WorkloadState.PENDING


def test_cordoned_and_tainted_nodes_take_no_new_work() -> None:
    from scheduling.models import Node

    small_cluster(gpu_nodes=2)
    q = make_quota(make_group())
    services.cordon_node(Node.objects.get(name="training-g0").pk, reason="maintenance")
    Node.objects.filter(name="training-g1").update(taints=["dedicated=infra:NoSchedule"])
    snap.bump_all_shards()
    w = submit(q, "w", gpu_count=1, gpu_milli=1000)
    services.run_cycle(q.group_id)
    w.refresh_from_db()
    assert w.state == WorkloadState.PENDING
    assert w.pending_code == "cordoned"


@pytest.mark.parametrize(
    ("_case", "fields", "bad"),
    [
        ("negative cpu", {"cpu_milli": -1}, "cpu_milli"),
        ("slice on many gpus", {"gpu_count": 2, "gpu_milli": 500}, "gpu_milli"),
        ("gpu milli without gpu", {"gpu_milli": 500}, "gpu_count"),
        ("bad topology", {"topology": "tight"}, "topology"),
        ("bad labels", {"node_labels": {"a": 1}}, "node_labels"),
        ("home volume not a dns label", {"home_volume": "Home_1"}, "home_volume"),
        ("negative home size", {"home_volume": "h", "home_volume_gib": -5}, "home_volume_gib"),
    ],
)
def test_submit_rejects_bad_input_and_writes_nothing(
    _case: str, fields: dict[str, Any], bad: str
) -> None:
    small_cluster()
    q = make_quota(make_group())
    with pytest.raises(InvalidInput) as err:
        submit(q, "x", **fields)
    assert bad in err.value.fields
    assert not Workload.objects.exists()


def test_submit_rejects_quota_of_another_tenant(team_a: Any, team_b: Any) -> None:
    q = make_quota(make_group(), team_b)
    with pytest.raises(InvalidInput) as err:
        services.submit_workload(
            tenant=team_a, quota=q, kind="job_pod", name="x", cpu_milli=1, memory_mib=1
        )
    assert "quota" in err.value.fields
    assert not Workload.objects.exists()


def _reclaim_world(team_a: Any, team_b: Any) -> tuple[Any, Any, list[Workload]]:
    """Two nodes of four GPUs; team-a (no min) borrows all eight, team-b is guaranteed four."""
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    group = make_group()
    qa = make_quota(group, team_a, name="a")
    qb = make_quota(group, team_b, name="b", gpu_min_milli=4000)
    borrowers = [submit(qa, f"a{i}", gpu_count=1, gpu_milli=1000) for i in range(8)]
    assert services.run_cycle(group.pk).placed == 8
    return group, qb, borrowers


def test_quota_within_its_share_reclaims_capacity_lent_to_a_sibling(
    team_a: Any, team_b: Any
) -> None:
    # given team-a (no min) borrowing all 8 GPUs of the pool with preemptible pods
    group, qb, borrowers = _reclaim_world(team_a, team_b)
    qa = borrowers[0].quota
    # when team-b asks for the 4 GPUs of its min
    claimant = submit(qb, "b", gpu_count=4, gpu_milli=1000)
    report = services.run_cycle(group.pk)
    # then 4 of team-a's pods are requeued (never deleted), and team-b starts in the same cycle on
    # the GPUs they freed (one node's four: the victims were chosen node by node)
    assert report.reclaimed == 4
    assert report.placed == 1
    claimant.refresh_from_db()
    assert claimant.state == WorkloadState.PLACED
    assert claimant.pending_code == ""
    requeued = Workload.objects.filter(pk__in=[w.pk for w in borrowers], state="pending")
    assert requeued.count() == 4
    assert {w.pending_code for w in requeued} == {"reclaimed"}
    assert len({w.placements.get(released_at__isnull=False).node_id for w in requeued}) == 1
    # and the next cycle leaves the requeued pods waiting for team-a's share, nothing moved twice
    services.run_cycle(group.pk)
    claimant.refresh_from_db()
    assert claimant.state == WorkloadState.PLACED
    assert Workload.objects.filter(quota=qa, state="pending").count() == 4
    assert_no_overcommit()


def test_snapshot_stays_in_step_with_the_database_after_a_reclaim(team_a: Any, team_b: Any) -> None:
    # given the pool lent out, and team-b's claimant placed in the cycle that reclaimed for it
    group, qb, _ = _reclaim_world(team_a, team_b)
    submit(qb, "b", gpu_count=4, gpu_milli=1000)
    assert services.run_cycle(group.pk).reclaimed == 4
    # when the next cycle runs (the requeued pods wait)
    submit(qb, "b2", gpu_count=1, gpu_milli=1000)
    report = services.run_cycle(group.pk)
    # then it used the cached snapshot, which is exactly a fresh build's: victims released, the
    # claimant on its node
    assert report.snapshot_cached
    cluster = services.snapshot_for_group(group)
    fresh = snap.build_group_cluster(group, cluster.version)
    assert cluster.state.gpu_free.tolist() == fresh.state.gpu_free.tolist()
    assert cluster.state.cpu_free.tolist() == fresh.state.cpu_free.tolist()
    assert cluster.applied == fresh.applied
    assert_no_overcommit()


def test_a_reclaim_while_another_writer_moved_the_shard_drops_the_snapshot(
    team_a: Any, team_b: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given another writer that bumps the shard's version after the cycle read it (a node change)
    group, qb, _ = _reclaim_world(team_a, team_b)
    submit(qb, "b", gpu_count=4, gpu_milli=1000)
    from scheduling.services import cycle

    real = cycle._hold_version

    def bumped_first(shard: Shard) -> bool:
        snap.bump_shards([shard.group_id])
        return real(shard)

    monkeypatch.setattr(cycle, "_hold_version", bumped_first)
    report = services.run_cycle(group.pk)
    assert (report.reclaimed, report.placed) == (4, 1)
    # then the worker does not keep a snapshot it cannot vouch for: the next cycle rebuilds it
    monkeypatch.setattr(cycle, "_hold_version", real)
    submit(qb, "b2", gpu_count=1, gpu_milli=1000)
    assert not services.run_cycle(group.pk).snapshot_cached
    assert_no_overcommit()


def test_a_reclaim_with_a_notice_places_the_claimant_only_when_its_victims_stop(
    team_a: Any, team_b: Any
) -> None:
    # given a 60 s polite-reclaim notice in the group
    group, qb, borrowers = _reclaim_world(team_a, team_b)
    QuotaGroup.objects.filter(pk=group.pk).update(reclaim_notice_seconds=60)
    claimant = submit(qb, "b", gpu_count=4, gpu_milli=1000)
    # when the cycle reclaims for it
    report = services.run_cycle(group.pk)
    # then nothing is stopped yet and the claimant waits out the countdown, placed nowhere
    claimant.refresh_from_db()
    assert (report.reclaimed, report.placed) == (0, 0)
    assert claimant.state == WorkloadState.PENDING
    assert claimant.pending_code == "reclaiming"
    assert Workload.objects.filter(pk__in=[w.pk for w in borrowers], state="placed").count() == 8
    assert_no_overcommit()


def test_non_preemptible_work_runs_within_the_guaranteed_dimensions_only(team_a: Any) -> None:
    # given a quota guaranteeing 2 GPUs on the GPU side but no CPU (GPU-side CPU min = 0)
    small_cluster(gpu_nodes=1, gpus_per_node=4)
    group = make_group()
    q = make_quota(group, team_a, name="a", gpu_min_milli=2000)
    # when non-preemptible pods ask for GPUs (and, as every pod does, some CPU)
    inside = submit(q, "inside", gpu_count=2, gpu_milli=1000, preemptible=False)
    beyond = submit(q, "beyond", gpu_count=1, gpu_milli=1000, preemptible=False)
    services.run_cycle(group.pk)
    # then the one within the GPU min runs (CPU is not a guaranteed dimension, so it does not bind)
    inside.refresh_from_db()
    beyond.refresh_from_db()
    assert inside.state == WorkloadState.PLACED
    # and the one beyond the min waits with the rule and the numbers
    assert beyond.state == WorkloadState.PENDING
    assert beyond.pending_code == "nonpreemptible_beyond_min"
    assert "non-preemptible work may only run within min 2 GPUs" in beyond.pending_reason


def test_group_sharing_nodes_with_an_older_group_places_nothing_on_them() -> None:
    # given two groups selecting the same 8 GPUs (the second made before overlaps were refused), and in
    # the second a quota whose min promises all 8
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    first = make_group("training")
    second = QuotaGroup.objects.create(name="second", node_selector={"pool": "training"})
    qa = make_quota(first, gpu_min_milli=4000, gpu_max_milli=8000)
    qb = make_quota(second, gpu_min_milli=8000, gpu_max_milli=8000)
    # when the second group's team submits 8 whole GPUs, then the first's team 4 within its min
    b_jobs = [submit(qb, f"b{i}", gpu_count=4, gpu_milli=1000) for i in range(2)]
    services.run_cycle(second.pk)
    a_job = submit(qa, "a", gpu_count=4, gpu_milli=1000)
    services.run_cycle(first.pk)
    # then the nodes count toward the older group only: the second group places nothing, the first's
    # guaranteed job runs
    for w in (*b_jobs, a_job):
        w.refresh_from_db()
    assert [w.state for w in b_jobs] == [WorkloadState.PENDING, WorkloadState.PENDING]
    assert a_job.state == WorkloadState.PLACED
    assert_no_overcommit()


def test_reclaim_for_a_multi_gpu_pod_stops_single_gpu_borrowers_on_one_node_only(
    team_a: Any, team_b: Any
) -> None:
    # given team-a (no min) borrowing all 12 GPUs of three 4-GPU nodes with single-GPU pods
    small_cluster(gpu_nodes=3, gpus_per_node=4)
    group = make_group()
    qa = make_quota(group, team_a, name="a")
    qb = make_quota(group, team_b, name="b", gpu_min_milli=4000)
    borrowers = [submit(qa, f"a{i}", gpu_count=1, gpu_milli=1000) for i in range(12)]
    assert services.run_cycle(group.pk).placed == 12
    node_of = dict(
        Placement.objects.filter(workload__in=borrowers, released_at__isnull=True).values_list(
            "workload_id", "node__name"
        )
    )
    # when team-b asks for one pod of 4 whole GPUs (its min)
    claimant = submit(qb, "b", gpu_count=4, gpu_milli=1000)
    report = services.run_cycle(group.pk)
    # then exactly the 4 pods of one node are requeued, and the next cycle places team-b there
    assert report.reclaimed == 4
    requeued = list(
        Workload.objects.filter(pk__in=[w.pk for w in borrowers], state="pending").values_list(
            "pk", flat=True
        )
    )
    assert len(requeued) == 4
    assert len({node_of[w] for w in requeued}) == 1
    services.run_cycle(group.pk)
    claimant.refresh_from_db()
    assert claimant.state == WorkloadState.PLACED
    assert (
        Placement.objects.get(workload=claimant, released_at__isnull=True).node.name
        == node_of[requeued[0]]
    )
    assert_no_overcommit()
