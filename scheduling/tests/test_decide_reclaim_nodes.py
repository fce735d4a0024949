"""Reclaim frees capacity where the waiting request can use it: victims chosen node by node.

No database (see test_decide.py): the decide step stays pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from core.placement import GangSpec, PlacementRequest
from core.placement.tests.builders import node
from quotas.reclaim import Victim, reclaimable
from quotas.usage import GroupSnapshot, WorkloadUsage
from scheduling.services.decide import (
    CycleInput,
    PendingWorkload,
    SnapshotRows,
    _Permitted,
    conclude,
    decide,
    propose,
)
from scheduling.services.reclaim_fit import NodeChoice, _floor, choose_by_node
from scheduling.tests.test_decide import cycle_input, pending, placed, quota, usage

NODES = 4
GPUS = 8


def _team_b_jobs(
    *, skip: frozenset[int] = frozenset(), pinned: frozenset[int] = frozenset()
) -> list[tuple[WorkloadUsage, str, tuple[int, ...]]]:
    """Team B's single-GPU borrowed jobs, one per GPU, started round-robin over the nodes (job k on node
    k % 4, started at minute k): the newest are spread over every node. `skip`: GPUs (node * 8 + gpu)
    left free; `pinned`: GPUs whose job is not preemptible."""
    jobs = []
    for k in range(NODES * GPUS):
        n, g = k % NODES, k // NODES
        slot = n * GPUS + g
        if slot in skip:
            continue
        u = usage(100 + k, 2, active=True, started=k)
        if slot in pinned:
            u = replace(u, preemptible=False)
        jobs.append((u, f"n{n + 1}", (g,)))
    return jobs


def _gang_cycle(
    jobs: list[tuple[WorkloadUsage, str, tuple[int, ...]]], pods: int = 2
) -> CycleInput:
    """Team A (min 16 GPUs, using nothing) submits a gang of `pods` pods of 8 whole GPUs each."""
    return cycle_input(
        [quota(1, "team-a", gpu_min=16, gpu_max=32), quota(2, "team-b", gpu_max=32)],
        [node(f"n{i + 1}", GPUS) for i in range(NODES)],
        running=tuple(jobs),
        waiting=tuple(
            pending(i + 1, 1, gpus=8, gang=9, min_available=pods, minute=i) for i in range(pods)
        ),
    )


def _without(
    jobs: list[tuple[WorkloadUsage, str, tuple[int, ...]]], stopped: set[int]
) -> list[tuple[WorkloadUsage, str, tuple[int, ...]]]:
    return [j for j in jobs if j[0].workload_id not in stopped]


def test_reclaim_for_a_gang_of_8_gpu_pods_frees_two_whole_nodes_and_the_gang_then_places() -> None:
    jobs = _team_b_jobs()
    decision = decide(_gang_cycle(jobs))
    assert placed(decision) == {}
    assert decision.reclaim is not None
    stopped = set(decision.reclaim.victim_ids)
    assert len(stopped) == 16
    where = {u.workload_id: node_name for u, node_name, _ in jobs}
    assert len({where[w] for w in stopped}) == 2
    assert decision.waiting[1].code == "reclaiming"
    assert decision.waiting[2].code == "reclaiming"
    # Once the victims have stopped, the next cycle places the whole gang on the freed nodes.
    after = decide(_gang_cycle(_without(jobs, stopped)))
    assert set(placed(after)) == {1, 2}
    assert set(placed(after).values()) == {where[w] for w in stopped}
    assert after.reclaim is None


def test_reclaim_by_quota_share_alone_scatters_its_victims_when_the_nodes_are_unknown() -> None:
    # The same pool without placements known to the cycle: the old rule (newest first) picks victims on
    # every node, which is what the node-by-node choice above avoids.
    decision = decide(replace(_gang_cycle(_team_b_jobs()), running={}))
    assert decision.reclaim is not None
    assert len(decision.reclaim.victim_ids) == 16
    where = {u.workload_id: n for u, n, _ in _team_b_jobs()}
    assert len({where[w] for w in decision.reclaim.victim_ids}) == NODES


def test_free_gpus_on_a_node_count_so_fewer_victims_are_stopped_there() -> None:
    # n1 has 2 GPUs free, the other nodes none: one 8-GPU pod needs only the 6 jobs left on n1 stopped.
    jobs = _team_b_jobs(skip=frozenset({0, 1}))
    cycle = cycle_input(
        [quota(1, "team-a", gpu_min=16, gpu_max=32), quota(2, "team-b", gpu_max=32)],
        [node(f"n{i + 1}", GPUS) for i in range(NODES)],
        running=tuple(jobs),
        waiting=(pending(1, 1, gpus=8),),
    )
    decision = decide(cycle)
    assert decision.reclaim is not None
    where = {u.workload_id: n for u, n, _ in jobs}
    assert len(decision.reclaim.victim_ids) == 6
    assert {where[w] for w in decision.reclaim.victim_ids} == {"n1"}


def test_when_no_permitted_victims_would_let_the_gang_place_nothing_is_stopped_and_it_says_so() -> (
    None
):
    # One job per node is not preemptible: no node can ever have 8 GPUs free for team A's pods.
    jobs = _team_b_jobs(pinned=frozenset(n * GPUS for n in range(NODES)))
    decision = decide(_gang_cycle(jobs))
    assert decision.reclaim is None
    assert placed(decision) == {}
    for wid in (1, 2):
        assert decision.waiting[wid].code != "reclaiming"
        assert "reclaim cannot make room" in decision.waiting[wid].reason
        assert "nothing is reclaimed" in decision.waiting[wid].reason


def test_a_gang_that_only_one_node_could_host_reclaims_nothing_for_its_second_pod() -> None:
    # Three nodes each keep a non-preemptible job: only one 8-GPU pod can be made room for, and a gang
    # of two needs both, so no job is stopped at all (not even the 8 on the one free-able node).
    jobs = _team_b_jobs(pinned=frozenset(n * GPUS for n in range(1, NODES)))
    decision = decide(_gang_cycle(jobs))
    assert decision.reclaim is None
    assert "reclaim cannot make room" in decision.waiting[2].reason


def _single_gpu_cycle(priorities: dict[int, int]) -> CycleInput:
    """Team A (min 1 GPU, using nothing) submits one single-GPU job; every GPU runs a team-B job, of
    priority `priorities[slot]` (slot = node * 8 + gpu; 5 when not given)."""
    jobs = [
        (replace(u, priority=priorities.get(n * GPUS + g, 5)), f"n{n + 1}", (g,))
        for u, name, gpus in _team_b_jobs()
        for n, g in [(int(name[1:]) - 1, gpus[0])]
    ]
    return cycle_input(
        [quota(1, "team-a", gpu_min=1, gpu_max=32), quota(2, "team-b", gpu_max=32)],
        [node(f"n{i + 1}", GPUS) for i in range(NODES)],
        running=tuple(jobs),
        waiting=(pending(1, 1, gpus=1),),
    )


def test_a_single_gpu_claimant_stops_the_least_important_job_on_whichever_node_it_runs() -> None:
    # The cheapest room is on the third node: nodes are not taken in order just because they fit.
    cycle = _single_gpu_cycle({2 * GPUS + 5: 1})
    decision = decide(cycle)
    assert decision.reclaim is not None
    (victim,) = decision.reclaim.victims
    assert victim.priority == 1
    assert {cycle.running[w].node for w in victim.workload_ids} == {"n3"}
    assert [(a.node, a.gpu_indices) for a in decision.reclaim.placements] == [("n3", (5,))]


def test_among_equally_cheap_rooms_the_first_node_wins() -> None:
    # Two priority-1 jobs, on the fourth and the second node: the second node is chosen.
    cycle = _single_gpu_cycle({3 * GPUS + 1: 1, 1 * GPUS + 6: 1})
    decision = decide(cycle)
    assert decision.reclaim is not None
    (victim,) = decision.reclaim.victims
    assert {cycle.running[w].node for w in victim.workload_ids} == {"n2"}


@dataclass
class _CountingRows:
    """The snapshot's workloads as the cycle's database reader serves them, counting what is read."""

    rows: SnapshotRows
    asked: int = 0
    whole: int = 0

    def active(self, ids: Collection[int], gangs: Collection[int]) -> Sequence[WorkloadUsage]:
        self.asked += len(ids)
        return self.rows.active(ids, gangs)

    def lowest(self, other_than: int) -> tuple[int, int] | None:
        return self.rows.lowest(other_than)

    def one_by_one(self) -> GroupSnapshot:
        self.whole += 1
        return self.rows.one_by_one()


def test_a_reclaim_on_a_full_cluster_reads_the_running_work_of_its_first_nodes_only() -> None:
    # 64 nodes full of team B's jobs, all alike: the first node tried has the cheapest room, so the
    # reclaim reads the jobs of the first batch of nodes (8 x 8) and none of the 448 others.
    nodes = 64
    jobs = [
        (usage(100 + k, 2, active=True, started=k), f"n{k % nodes + 1:02d}", (k // nodes,))
        for k in range(nodes * GPUS)
    ]
    cycle = cycle_input(
        [quota(1, "team-a", gpu_min=1, gpu_max=8), quota(2, "team-b", gpu_max=nodes * GPUS)],
        [node(f"n{i + 1:02d}", GPUS) for i in range(nodes)],
        running=tuple(jobs),
        waiting=(pending(1, 1, gpus=1),),
    )
    assert cycle.workloads is not None
    rows = _CountingRows(SnapshotRows(cycle.workloads))
    decision = conclude(propose(cycle), cycle.workloads, rows=rows)
    assert decision.reclaim is not None
    (victim,) = decision.reclaim.victims
    on_n01 = [u for u, where, _ in jobs if where == "n01"]
    assert victim.workload_ids == (max(on_n01, key=lambda u: u.started_at).workload_id,)
    assert [a.node for a in decision.reclaim.placements] == ["n01"]
    assert rows.asked == 8 * GPUS
    assert rows.whole == 0
    again = decide(cycle)
    assert (again.reclaim, again.waiting) == (decision.reclaim, decision.waiting)


@dataclass
class _AllAtOnce:
    """Every candidate handed out at the first node asked about (as before reclaim read node by node)."""

    victims: Sequence[Victim]
    handed: bool = False

    def floor(self) -> tuple[int, int, int]:
        return _floor(self.victims)

    def on(self, nodes: Sequence[str]) -> Sequence[Victim]:
        return self.rest()

    def rest(self) -> Sequence[Victim]:
        out, self.handed = ([] if self.handed else list(self.victims)), True
        return out


def _world(draw: st.DrawFn) -> tuple[CycleInput, list[WorkloadUsage]]:
    """Team B's running work on 6 nodes: jobs of 1-4 GPUs and gangs of two pods on two nodes, random
    priorities and starts, some not preemptible, some GPUs free; team A's claimant of 1-8 GPUs or a
    gang of two 8-GPU pods."""
    nodes, running, wid, gang = 6, [], 100, 50
    free = {n: list(range(GPUS)) for n in range(nodes)}
    for _ in range(draw(st.integers(4, 30))):
        gpus = draw(st.sampled_from((1, 1, 2, 4)))
        spread = draw(st.booleans())
        homes = draw(st.lists(st.integers(0, nodes - 1), min_size=2 if spread else 1, max_size=2 if spread else 1, unique=True))  # fmt: skip
        if any(len(free[n]) < gpus for n in homes):
            continue
        priority, started = draw(st.integers(0, 3)), draw(st.integers(0, 5))
        preemptible = draw(st.integers(0, 9)) > 0
        gang += 1
        for n in homes:
            wid += 1
            indices = tuple(free[n][:gpus])
            del free[n][:gpus]
            u = replace(
                usage(wid, 2, gpus=gpus, active=True, priority=priority, started=started,
                      gang=gang if spread else None),
                preemptible=preemptible,
            )  # fmt: skip
            running.append((u, f"n{n + 1}", indices))
    waiting: tuple[PendingWorkload, ...]
    if draw(st.booleans()):
        waiting = (pending(1, 1, gpus=draw(st.integers(1, 8))),)
    else:
        waiting = tuple(pending(i + 1, 1, gpus=8, gang=9, min_available=2) for i in range(2))
    cycle = cycle_input(
        [quota(1, "team-a", gpu_min=16, gpu_max=48), quota(2, "team-b", gpu_max=48)],
        [node(f"n{i + 1}", GPUS) for i in range(nodes)],
        running=tuple(running),
        waiting=waiting,
    )
    return cycle, [w.usage for w in waiting]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_victims_read_node_by_node_are_those_chosen_from_every_candidate_known_up_front(
    data: st.DataObject,
) -> None:
    cycle, claim = _world(data.draw)
    assert cycle.workloads is not None
    claimant = claim if len(claim) > 1 else claim[0]
    pods = [PlacementRequest(str(u.workload_id), u.resources.cpu_milli, 1024,
                             u.resources.gpu_milli // 1000, 1000, 0) for u in claim]  # fmt: skip
    gang = GangSpec("gang9", ("1", "2"), 2) if len(claim) > 1 else None
    everyone = reclaimable(cycle.workloads, claimant)
    up_front = choose_by_node(
        cycle.cluster, pods, len(pods), _AllAtOnce(everyone), cycle.running, gang=gang
    )
    assert choose_by_node(cycle.cluster, pods, len(pods), everyone, cycle.running, gang=gang) == (
        up_front
    )
    by_node: dict[str, list[int]] = {}
    for wid, a in cycle.running.items():
        by_node.setdefault(a.node, []).append(wid)
    source = _Permitted(cycle.workloads, claimant, None, SnapshotRows(cycle.workloads), by_node, 1)
    lazily = choose_by_node(cycle.cluster, pods, len(pods), source, cycle.running, gang=gang)
    assert lazily == up_front
    if isinstance(lazily, NodeChoice):
        permitted = {v.workload_ids for v in everyone}
        assert all(v.workload_ids in permitted for v in lazily.victims)
        assert len(lazily.placements) == len(pods)
