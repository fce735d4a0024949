"""The decide step of a cycle with no database: an in-memory CycleInput in, a CycleDecision out.

No test here has the django_db mark or a fixture that needs the database: pytest-django refuses any query
they would make, so these tests passing proves `decide` reads nothing but its input.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from core.placement import Assignment, ClusterState, PlacementRequest, ReservationPolicy
from core.placement.tests.builders import node
from quotas.models import QuotaGroup
from quotas.resources import Resources, Side
from quotas.usage import GroupCapacity, QuotaSpec, WorkloadUsage, aggregate, build_snapshot
from scheduling.services.decide import CycleInput, PendingWorkload, Waiting, decide

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CARD_MIB = 40960
BIG = 10**9


def quota(quota_id: int, name: str, *, gpu_min: int = 0, gpu_max: int = 8) -> QuotaSpec:
    """A quota guaranteeing `gpu_min` whole GPUs (GPU side) and allowing `gpu_max`; CPU side open."""

    def side(gpus: int, cpu: int) -> Resources:
        return Resources(gpu_milli=gpus * 1000, gpu_memory_mib=BIG, cpu_milli=cpu, memory_mib=BIG)

    return QuotaSpec(
        quota_id=quota_id,
        name=name,
        tenant_id=quota_id,
        tenant_slug=name,
        lend_idle_min=True,
        min={
            Side.GPU: Resources(gpu_milli=gpu_min * 1000, gpu_memory_mib=gpu_min * CARD_MIB),
            Side.CPU: Resources(),
        },
        max={Side.GPU: side(gpu_max, BIG), Side.CPU: side(0, BIG)},
        weight={Side.GPU: Resources(1, 1, 1, 1), Side.CPU: Resources(1, 1, 1, 1)},
    )


def usage(
    wid: int,
    quota_id: int,
    *,
    gpus: int = 1,
    cpu: int = 1000,
    active: bool = False,
    priority: int = 0,
    gang: int | None = None,
    started: int = 0,
) -> WorkloadUsage:
    """A workload of `gpus` whole cards (0 = CPU only), charged as the quota code charges it."""
    return WorkloadUsage(
        workload_id=wid,
        name=f"w{wid}",
        kind="job_pod",
        quota_id=quota_id,
        side=Side.GPU if gpus else Side.CPU,
        resources=Resources(
            gpu_milli=gpus * 1000, gpu_memory_mib=gpus * CARD_MIB, cpu_milli=cpu, memory_mib=1024
        ),
        active=active,
        priority=priority,
        gang_id=gang,
        gang_name=f"gang{gang}" if gang else "",
        started_at=T0 + timedelta(minutes=started) if active else None,
    )


def pending(
    wid: int, quota_id: int, *, minute: int = 0, min_available: int = 0, labels: tuple = (), **kw
) -> PendingWorkload:
    u = usage(wid, quota_id, **kw)
    gpus = u.resources.gpu_milli // 1000
    return PendingWorkload(
        usage=u,
        request=PlacementRequest(
            str(wid),
            u.resources.cpu_milli,
            1024,
            gpus,
            1000 if gpus else 0,
            0,
            node_labels=labels,
            priority=u.priority,
        ),
        submitted_at=T0 + timedelta(minutes=minute),
        gang_min_available=min_available,
    )


def cycle_input(
    specs: list[QuotaSpec],
    nodes: list,
    *,
    running: tuple[tuple[WorkloadUsage, str, tuple[int, ...]], ...] = (),
    waiting: tuple[PendingWorkload, ...] = (),
    gang_active: dict[int, int] | None = None,
    reservation: ReservationPolicy | None = None,
    reclaim: bool = True,
    capacity_gpus: int | None = None,
    where_known: bool = True,
) -> CycleInput:
    """The input of a cycle: `running` workloads (usage, node, GPU indices) applied to an engine state of
    `nodes`; the quota snapshot counts them as used and `waiting` as pending demand. `capacity_gpus`:
    the GPU capacity the quota snapshot counts (default: the nodes' GPUs); more than the nodes have makes
    the engine, not the quota, the one that says no (as fragmentation does on a real pool).
    `where_known`: the cycle is told where each running workload is placed (as the real cycle is), so
    reclaim chooses its victims node by node; False: by quota share alone."""
    state = ClusterState.from_nodes(nodes, reservation or ReservationPolicy())
    where: dict[int, Assignment] = {}
    for u, node_name, gpus in running:
        where[u.workload_id] = Assignment(
            str(u.workload_id),
            node_name,
            gpus,
            1000 if gpus else 0,
            CARD_MIB if gpus else 0,
            u.resources.cpu_milli,
            1024,
        )
        state.apply(where[u.workload_id])
    gpu_count = capacity_gpus or sum(len(n.gpus) for n in nodes)
    gpu_nodes_cpu = sum(n.cpu_milli for n in nodes if n.gpus)
    snapshot = build_snapshot(
        group_id=1,
        group_name="pool",
        allow_overcommitted_min=False,
        capacity=GroupCapacity(
            gpu=Resources(gpu_count * 1000, gpu_count * CARD_MIB, gpu_nodes_cpu, BIG),
            cpu=Resources(0, 0, sum(n.cpu_milli for n in nodes), BIG),
        ),
        specs=specs,
        workloads=[u for u, _, _ in running] + [p.usage for p in waiting],
        headroom=False,
    )
    return CycleInput(
        pending=waiting,
        quota=snapshot,
        cluster=state,
        gang_active=gang_active or {},
        workloads=snapshot if reclaim else None,
        running=where if where_known else {},
    )


def test_these_tests_cannot_reach_the_database() -> None:
    with pytest.raises(RuntimeError, match="Database access not allowed"):
        QuotaGroup.objects.count()


def placed(decision) -> dict[int, str]:  # type: ignore[no-untyped-def]
    return {int(a.request_id): a.node for a in decision.placements}


def codes(decision) -> dict[int, tuple[str, int]]:  # type: ignore[no-untyped-def]
    return {wid: (w.code, w.position) for wid, w in decision.waiting.items()}


def test_places_what_fits_and_gives_the_rest_a_reason_and_a_position() -> None:
    cycle = cycle_input(
        [quota(1, "team-a")],
        [node("n1", 2)],
        waiting=(
            pending(1, 1, minute=0),
            pending(2, 1, minute=1),
            pending(3, 1, minute=2),
            pending(4, 1, minute=3),
        ),
        capacity_gpus=4,
    )
    decision = decide(cycle)
    assert placed(decision) == {1: "n1", 2: "n1"}
    assert codes(decision) == {3: ("insufficient_gpu", 1), 4: ("insufficient_gpu", 2)}
    assert "GPU" in decision.waiting[3].reason
    assert (decision.admitted, decision.refused, decision.reclaim) == (4, 0, None)


def test_decide_leaves_its_input_untouched_and_gives_the_same_decision_twice() -> None:
    cycle = cycle_input([quota(1, "team-a")], [node("n1", 2)], waiting=(pending(1, 1),))
    before = cycle.cluster.totals()
    first, second = decide(cycle), decide(cycle)
    assert cycle.cluster.totals() == before
    assert first.state.totals() != before  # the decision carries the state with its placements
    assert (first.placements, first.waiting) == (second.placements, second.waiting)


def test_quota_refusal_waits_with_the_quotas_reason_and_nothing_is_planned_for_it() -> None:
    cycle = cycle_input(
        [quota(1, "team-a", gpu_max=1)],
        [node("n1", 4)],
        running=((usage(9, 1, active=True), "n1", (0,)),),
        waiting=(pending(1, 1),),
    )
    decision = decide(cycle)
    assert placed(decision) == {}
    assert decision.waiting == {
        1: Waiting("quota_max", "team-a GPU side: 1 of max 1 GPU in use, request 1.", 1)
    }
    assert (decision.admitted, decision.refused) == (0, 1)


def test_a_burst_cannot_squeeze_past_the_runtime_share_admitted_in_the_same_cycle() -> None:
    cycle = cycle_input(
        [quota(1, "team-a", gpu_max=2)],
        [node("n1", 4)],
        waiting=(pending(1, 1, minute=0), pending(2, 1, minute=1), pending(3, 1, minute=2)),
    )
    decision = decide(cycle)
    assert placed(decision) == {1: "n1", 2: "n1"}
    assert codes(decision) == {3: ("quota_runtime", 1)}
    assert decision.waiting[3].reason == (
        "team-a GPU side: 0 in use + 2 admitted this cycle + request 1 is more than its runtime "
        "share of 2 GPUs; waiting for capacity to free up."
    )


def test_higher_priority_first_then_the_quota_furthest_below_its_share_then_age() -> None:
    nowhere = (("zone", "mars"),)  # no node has it: everyone waits, the positions show the order
    cycle = cycle_input(
        [quota(1, "team-a"), quota(2, "team-b")],
        [node("n1", 4)],
        running=((usage(9, 1, active=True), "n1", (0,)),),
        waiting=(
            pending(1, 1, minute=0, labels=nowhere),
            pending(2, 2, minute=1, labels=nowhere),
            pending(3, 1, minute=2, labels=nowhere, priority=5),
        ),
    )
    decision = decide(cycle)
    assert codes(decision) == {3: ("node_labels", 1), 2: ("node_labels", 2), 1: ("node_labels", 3)}
    assert decision.reclaim is None  # a label no node has is not a lack of capacity


def test_a_gang_that_cannot_complete_holds_nothing_and_a_later_request_takes_the_gpu() -> None:
    cycle = cycle_input(
        [quota(1, "team-a")],
        [node("n1", 2)],
        running=((usage(9, 1, active=True), "n1", (0,)),),
        waiting=(
            pending(1, 1, gang=7, min_available=2, priority=1),
            pending(2, 1, gang=7, min_available=2, priority=1),
            pending(3, 1, minute=5),
        ),
        capacity_gpus=4,
    )
    decision = decide(cycle)
    assert placed(decision) == {3: "n1"}
    assert codes(decision) == {1: ("gang_incomplete", 1), 2: ("gang_incomplete", 2)}


def test_a_gang_places_all_its_members_together() -> None:
    cycle = cycle_input(
        [quota(1, "team-a")],
        [node("n1", 2), node("n2", 2)],
        waiting=tuple(pending(i, 1, gang=7, min_available=3) for i in (1, 2, 3)),
    )
    decision = decide(cycle)
    assert sorted(placed(decision)) == [1, 2, 3]
    assert decision.waiting == {}


def test_a_complete_gang_places_its_remaining_members_one_by_one() -> None:
    cycle = cycle_input(
        [quota(1, "team-a")],
        [node("n1", 2)],
        running=((usage(9, 1, active=True, gang=7), "n1", (0,)),),
        waiting=(pending(1, 1, gang=7, min_available=1), pending(2, 1, gang=7, min_available=1)),
        gang_active={7: 1},
        capacity_gpus=4,
    )
    decision = decide(cycle)
    assert placed(decision) == {1: "n1"}
    assert codes(decision) == {2: ("insufficient_gpu", 1)}


def test_cpu_only_work_waits_when_only_the_part_reserved_for_gpu_work_is_left() -> None:
    reservation = ReservationPolicy(gpu_node_cpu_fraction=0.25)  # 24 of 32 CPUs for CPU-only work
    cycle = cycle_input(
        [quota(1, "team-a")],
        [node("n1", 1), node("n2", 1)],
        running=(
            (usage(8, 1, gpus=0, cpu=20000, active=True), "n1", ()),
            (usage(9, 1, gpus=0, cpu=20000, active=True), "n2", ()),
        ),
        waiting=(pending(1, 1, gpus=0, cpu=8000), pending(2, 1, gpus=0, cpu=4000, minute=1)),
        reservation=reservation,
    )
    decision = decide(cycle)
    assert placed(decision) == {2: "n1"}
    assert codes(decision) == {1: ("reserved", 1)}
    assert decision.reclaim is None  # nothing lent to another quota to take back


def _lent_pool(*, gang_priority: int = 0) -> CycleInput:
    """4 GPUs, all in use: team-a (min 2) runs 1 and asks for 1 more; team-b (min 0) borrows 3: a gang
    of two (gang 7) and a single job (priority 5)."""
    return cycle_input(
        [quota(1, "team-a", gpu_min=2), quota(2, "team-b")],
        [node("n1", 2), node("n2", 2)],
        running=(
            (usage(11, 2, active=True, gang=7, priority=gang_priority, started=1), "n1", (0,)),
            (usage(12, 2, active=True, gang=7, priority=gang_priority, started=1), "n1", (1,)),
            (usage(13, 2, active=True, priority=5, started=2), "n2", (0,)),
            (usage(14, 1, active=True), "n2", (1,)),
        ),
        waiting=(pending(1, 1),),
    )


def test_a_quota_within_its_min_reclaims_a_borrowing_gang_whole() -> None:
    decision = decide(_lent_pool())
    assert placed(decision) == {}
    assert decision.reclaim is not None
    assert decision.reclaim.claimant_ids == (1,)
    # One GPU is needed, but the gang goes as one unit: both members, never one of them.
    assert decision.reclaim.victim_ids == (11, 12)
    assert [v.gang_id for v in decision.reclaim.victims] == [7]
    assert decision.waiting[1].code == "reclaiming"
    assert decision.waiting[1].reason == decision.reclaim.message
    assert "gang7" in decision.reclaim.message


def test_reclaim_takes_the_lowest_priority_unit_first() -> None:
    decision = decide(_lent_pool(gang_priority=9))
    assert decision.reclaim is not None
    assert decision.reclaim.victim_ids == (13,)


def test_without_the_groups_workloads_no_reclaim_is_decided_and_the_reason_stays() -> None:
    decision = decide(replace(_lent_pool(), workloads=None))
    assert decision.reclaim is None
    assert codes(decision) == {1: ("insufficient_gpu", 1)}


def test_a_snapshot_of_summed_usage_decides_the_same_as_one_of_single_workloads() -> None:
    cycle = _lent_pool()
    summed = build_snapshot(
        group_id=1,
        group_name="pool",
        allow_overcommitted_min=False,
        capacity=cycle.quota.capacity,
        specs=cycle.quota.specs,
        workloads=aggregate(cycle.quota.workloads),
        headroom=False,
    )
    one_by_one, aggregated = decide(cycle), decide(replace(cycle, quota=summed))
    assert (one_by_one.placements, one_by_one.waiting) == (
        aggregated.placements,
        aggregated.waiting,
    )


def test_reclaim_counts_what_the_same_cycle_placed_as_in_use() -> None:
    # 4 GPUs; team-b (min 0) borrows 2; team-a (min 2) asks for 3 one by one: two take the free GPUs in
    # this cycle, the third finds none and takes back one of team-b's (the group is not "2 GPUs free").
    cycle = cycle_input(
        [quota(1, "team-a", gpu_min=2), quota(2, "team-b")],
        [node("n1", 2), node("n2", 2)],
        running=(
            (usage(11, 2, active=True, started=1), "n1", (0,)),
            (usage(12, 2, active=True, started=2), "n1", (1,)),
        ),
        waiting=(pending(1, 1, minute=0), pending(2, 1, minute=1), pending(3, 1, minute=2)),
    )
    decision = decide(cycle)
    assert placed(decision) == {1: "n2", 2: "n2"}
    assert decision.reclaim is not None
    assert (decision.reclaim.claimant_ids, decision.reclaim.victim_ids) == ((3,), (12,))
    assert codes(decision) == {3: ("reclaiming", 1)}
