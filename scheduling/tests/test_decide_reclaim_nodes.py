"""Reclaim frees capacity where the waiting request can use it: victims chosen node by node.

No database (see test_decide.py): the decide step stays pure.
"""

from __future__ import annotations

from dataclasses import replace

from quotas.usage import WorkloadUsage
from scheduling.services.decide import CycleInput, decide
from scheduling.tests.engine.builders import node
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
