"""plan_defrag invariants, property-tested with hypothesis over random clusters, running work and queues."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.placement import (
    Assignment,
    ClusterState,
    GpuSpec,
    NodeSpec,
    PlacementRequest,
    TopologyPolicy,
    feasible_mask,
    plan_placements,
)
from core.placement.defrag import DefragLimits, MoveCandidate, apply_plan, plan_defrag
from core.placement.gpu_select import make_assignment

from .test_properties import clusters


def candidate(a: Assignment, owner: str, cost: int) -> MoveCandidate:
    return MoveCandidate(
        a.request_id,
        a.node,
        a.gpu_indices,
        a.gpu_milli,
        a.gpu_memory_mib if a.gpu_milli < 1000 else 0,
        a.cpu_milli,
        a.memory_mib,
        cost_seconds=cost,
        owner=owner,
    )


Scenario = tuple[
    ClusterState, list[Assignment], list[MoveCandidate], list[PlacementRequest], DefragLimits
]


@st.composite
def fragmented_clusters(draw: st.DrawFn) -> list[NodeSpec]:
    """2-5 GPU nodes of mostly one model (so moves have somewhere to go), sometimes a cordoned or
    unhealthy piece, sometimes little CPU."""
    nodes = []
    for i in range(draw(st.integers(2, 5))):
        g = draw(st.integers(1, 8))
        model = draw(st.sampled_from(("A100", "A100", "A100", "T4")))
        gpus = tuple(
            GpuSpec(
                j,
                model,
                40960,
                numa_node=j * 2 // g,
                nvlink_group=j // 2,
                healthy=draw(st.integers(0, 9)) > 0,
            )
            for j in range(g)
        )
        nodes.append(
            NodeSpec(
                f"n{i}",
                draw(st.sampled_from((4000, 32000, 64000))),
                draw(st.sampled_from((16384, 131072))),
                gpus,
                model,
                (("zone", draw(st.sampled_from("ab"))),),
                draw(st.integers(0, 9)) > 0,
            )
        )
    return nodes


@st.composite
def gpu_requests(draw: st.DrawFn, prefix: str, low: int, high: int) -> list[PlacementRequest]:
    out = []
    for k in range(draw(st.integers(low, high))):
        whole = draw(st.booleans())
        out.append(
            PlacementRequest(
                f"{prefix}{k}",
                draw(st.sampled_from((0, 1000, 4000, 16000))),
                draw(st.sampled_from((0, 1024, 8192))),
                draw(st.integers(1, 4)) if whole else draw(st.sampled_from((0, 1, 1, 1))),
                1000 if whole else draw(st.integers(50, 900)),
                0 if whole else draw(st.sampled_from((0, 2048, 20000))),
                draw(st.sampled_from(((), (), ("T4",)))),
                (("zone", "a"),) if draw(st.integers(0, 5)) == 0 else (),
                draw(st.sampled_from(list(TopologyPolicy))),
            )
        )
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    nodes = draw(st.one_of(fragmented_clusters(), clusters()))
    state = ClusterState.from_nodes(nodes)
    running = plan_placements(
        state, draw(gpu_requests("r", 1, 30)), policy=draw(st.sampled_from(("firstfit", "random")))
    ).placements
    for a in running:
        state.apply(a)
    movable = [a for a in running if draw(st.integers(0, 4)) > 0]
    cands = [
        candidate(a, draw(st.sampled_from(("t1", "t2", "t3"))), draw(st.integers(0, 900)))
        for a in movable
    ]
    waiting = [] if draw(st.integers(0, 4)) == 0 else draw(gpu_requests("w", 1, 6))
    limits = DefragLimits(
        max_moves=draw(st.integers(0, 8)),
        max_moves_per_owner=draw(st.integers(0, 6)),
        max_total_cost_seconds=draw(st.sampled_from((0, 600, 3000, 10_000))),
        max_cost_seconds_per_move=draw(st.sampled_from((300, 900))),
    )
    return state, list(running), cands, waiting, limits


@st.composite
def chain_scenarios(draw: st.DrawFn) -> Scenario:
    """Issue 21: ``a`` (2-4 cards) holds whole-card workloads that fit no other node, because every card of
    ``b``, ``c`` (and 0-2 more nodes) carries a slice; a request for all of ``a`` waits, so only a chain (a
    slice moved off a landing node, then the card moved there) can free ``a``."""
    g = draw(st.integers(2, 4))
    sizes = [g] + [draw(st.integers(1, 2)) for _ in range(draw(st.integers(2, 4)))]
    nodes = [
        NodeSpec(
            f"n{i}",
            64000 if i == 0 else draw(st.sampled_from((4000, 16000, 64000))),
            131072,
            tuple(GpuSpec(j, "A100", 40960) for j in range(n)),
            "A100",
        )
        for i, n in enumerate(sizes)
    ]
    state = ClusterState.from_nodes(nodes)
    running: list[Assignment] = []
    busy = sorted(draw(st.sets(st.integers(0, g - 1), min_size=1, max_size=g - 1)))
    for j in busy:
        r = PlacementRequest(f"card{j}", draw(st.sampled_from((1000, 8000))), 1024, 1, 1000)
        running.append(make_assignment(state, 0, r, (j,)))
        state.apply(running[-1])
    for i, n in enumerate(sizes[1:], start=1):
        for j in range(n):
            milli = draw(st.integers(50, 900))
            r = PlacementRequest(
                f"s{i}.{j}", 1000, 1024, 1, milli, draw(st.sampled_from((0, 2048)))
            )
            running.append(make_assignment(state, i, r, (j,)))
            state.apply(running[-1])
    movable = [a for a in running if draw(st.integers(0, 5)) > 0]
    cands = [candidate(a, draw(st.sampled_from(("t1", "t2"))), 60) for a in movable]
    wide = PlacementRequest("wide", draw(st.sampled_from((1000, 8000))), 1024, g, 1000)
    waiting = [wide, *draw(gpu_requests("w", 0, 2))]
    limits = DefragLimits(
        max_moves=draw(st.integers(0, 8)),
        max_moves_per_owner=draw(st.integers(1, 8)),
        max_total_cost_seconds=draw(st.sampled_from((60, 600, 3000))),
        max_cost_seconds_per_move=300,
        chains=draw(st.integers(0, 4)) > 0,
    )
    return state, running, cands, waiting, limits


@settings(max_examples=150, deadline=None)
@given(st.one_of(scenarios(), chain_scenarios()))
def test_plan_respects_candidates_limits_and_capacity(scenario: Scenario) -> None:
    state, running, cands, waiting, limits = scenario
    frozen = {k: getattr(state, k).copy() for k in ("cpu_free", "gpu_free", "gpu_mem_free")}
    plan = plan_defrag(state, waiting, cands, limits)
    for k, v in frozen.items():
        assert np.array_equal(getattr(state, k), v), "plan_defrag changed its input state"
    by_id = {c.workload_id: c for c in cands}
    moved = [m.workload_id for m in plan.moves]
    # only candidates move, each at most once, from where they are, never onto their own node
    assert set(moved) <= set(by_id)
    assert len(moved) == len(set(moved))
    for m in plan.moves:
        c = by_id[m.workload_id]
        assert (m.from_node, m.from_gpus) == (c.node, c.gpus)
        assert m.to_node != m.from_node
        assert len(m.to_gpus) == len(c.gpus)
        assert m.cost_seconds == c.cost_seconds
    # limits
    assert len(plan.moves) <= limits.max_moves
    assert all(
        n <= limits.max_moves_per_owner for n in Counter(m.owner for m in plan.moves).values()
    )
    assert plan.cost_seconds <= limits.max_total_cost_seconds
    assert all(m.cost_seconds <= limits.max_cost_seconds_per_move for m in plan.moves)
    # never over-commits: apply_plan raises on any overlap; the bounds hold afterwards
    after = apply_plan(state, plan)
    assert (after.cpu_free >= 0).all()
    assert (after.mem_free >= 0).all()
    assert (after.gpu_free >= 0).all()
    assert (after.gpu_free <= 1000).all()
    assert (after.gpu_mem_free >= 0).all()
    assert after.allocated_gpu_milli == state.allocated_gpu_milli
    # work that did not move is still held exactly where it was
    gone = set(moved)
    for a in running:
        if a.request_id not in gone:
            after.release(a)
    for m in plan.moves:
        after.release(m.target())
    assert after.allocated_gpu_milli == 0
    # unlocks: waiting requests, each once, only when there are moves
    assert len({u.request_id for u in plan.unlocks}) == len(plan.unlocks)
    assert {u.request_id for u in plan.unlocks} <= {r.request_id for r in waiting}
    if plan.unlocks:
        assert plan.moves
    # same input -> same plan
    assert plan_defrag(state, waiting, cands, limits) == plan


@settings(max_examples=150, deadline=None)
@given(st.one_of(scenarios(), chain_scenarios()))
def test_applying_the_plan_then_each_unlock_succeeds_as_planned(scenario: Scenario) -> None:
    state, _, cands, waiting, limits = scenario
    plan = plan_defrag(state, waiting, cands, limits)
    after = apply_plan(state, plan)
    by_id = {r.request_id: r for r in waiting}
    for u in plan.unlocks:
        r = by_id[u.request_id]
        i = after.index[u.node]
        assert feasible_mask(after, r)[i], f"{u.request_id} does not fit {u.node} after the moves"
        after.apply(make_assignment(after, i, r, u.gpus))  # raises if the planned GPUs are taken


@settings(max_examples=40, deadline=None)
@given(st.one_of(scenarios(), chain_scenarios()))
def test_unlocked_request_did_not_fit_before_the_moves(scenario: Scenario) -> None:
    state, _, cands, waiting, limits = scenario
    plan = plan_defrag(state, waiting, cands, limits)
    by_id = {r.request_id: r for r in waiting}
    for u in plan.unlocks:
        assert not feasible_mask(state, by_id[u.request_id])[state.index[u.node]]


@settings(max_examples=150, deadline=None)
@given(st.one_of(scenarios(), chain_scenarios()))
def test_a_workload_that_fit_no_other_node_moves_only_in_a_chain_that_unlocks_a_request(
    scenario: Scenario,
) -> None:
    state, _, cands, waiting, limits = scenario
    plan = plan_defrag(state, waiting, cands, limits)
    by_id = {c.workload_id: c for c in cands}
    stuck = []
    for m in plan.moves:
        c = by_id[m.workload_id]
        fits = feasible_mask(state, c.request())
        fits[state.index[c.node]] = False
        if not fits.any():
            stuck.append(m)
    # at most one chained workload per freed node, never when chains are off, never onto a freed node
    assert len(stuck) <= len(plan.unlocks)
    if not limits.chains:
        assert stuck == []
    assert not {m.to_node for m in stuck} & {u.node for u in plan.unlocks}
