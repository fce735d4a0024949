"""plan_defrag / apply_plan: moves that unlock waiting requests, limits, CPU at the landing node, purity."""

from __future__ import annotations

import pytest

from core.placement import ClusterState, PlacementRequest, place_one
from core.placement.defrag import (
    DefragLimits,
    MoveCandidate,
    apply_plan,
    plan_defrag,
)
from core.placement.gpu_select import make_assignment
from core.placement.policies import POLICIES

from .builders import cluster, node, req


def run(
    state: ClusterState, rid: str, node_name: str, gpus: tuple[int, ...], **kw: object
) -> MoveCandidate:
    """Apply a running workload to ``state`` and return it as a move candidate.

    ``kw``: ``milli`` (per GPU, default 1000), ``cpu``, ``mem``, ``gpu_mem`` (slices), ``cost``, ``owner``.
    """
    milli = int(kw.get("milli", 1000))  # type: ignore[call-overload]
    cpu = int(kw.get("cpu", 1000))  # type: ignore[call-overload]
    mem = int(kw.get("mem", 1024))  # type: ignore[call-overload]
    gpu_mem = int(kw.get("gpu_mem", 0))  # type: ignore[call-overload]
    r = PlacementRequest(rid, cpu, mem, len(gpus), milli if gpus else 0, gpu_mem)
    state.apply(make_assignment(state, state.index[node_name], r, gpus))
    return MoveCandidate(
        rid,
        node_name,
        gpus,
        milli if gpus else 0,
        gpu_mem,
        cpu,
        mem,
        cost_seconds=int(kw.get("cost", 60)),  # type: ignore[call-overload]
        owner=str(kw.get("owner", rid)),
    )


def moved(plan: object) -> dict[str, tuple[str, str]]:
    return {m.workload_id: (m.from_node, m.to_node) for m in plan.moves}  # type: ignore[attr-defined]


def test_one_move_frees_a_whole_node_for_a_waiting_eight_gpu_job() -> None:
    s = cluster(node("a", 8, model="H100"), node("b", 8, model="H100"))
    ca = run(s, "wa", "a", (3,))
    cb = run(s, "wb", "b", (5,))
    before = s.gpu_free.copy()
    plan = plan_defrag(s, [req("big", gpus=8, milli=1000)], [ca, cb])
    assert moved(plan) == {"wa": ("a", "b")}
    assert [(u.request_id, u.node, u.gpus) for u in plan.unlocks] == [("big", "a", tuple(range(8)))]
    assert plan.freed_whole_nodes == 1
    assert plan.value == "1 move frees 1 whole H100 node; the waiting 8-GPU request big can start."
    assert (s.gpu_free == before).all()
    after = apply_plan(s, plan)
    assert int(after.whole_free[after.index["a"]]) == 8


def test_request_that_fits_already_needs_no_move() -> None:
    s = cluster(node("a", 8))
    ca = run(s, "wa", "a", (0,))
    plan = plan_defrag(s, [req("two", gpus=2, milli=1000)], [ca])
    assert plan.moves == ()
    assert plan.unlocks == ()
    assert plan.value.startswith("No move helps")


def test_workload_that_is_not_a_candidate_is_never_moved() -> None:
    s = cluster(node("a", 2), node("b", 2))
    run(s, "pinned", "a", (0,))
    cb = run(s, "free", "b", (0,))
    plan = plan_defrag(s, [req("pair", gpus=2, milli=1000)], [cb])
    assert moved(plan) == {"free": ("b", "a")}
    assert plan.unlocks[0].node == "b"


def test_move_is_refused_where_the_landing_node_has_no_cpu_left() -> None:
    # b has a free GPU but almost no CPU: the 8-core workload of a cannot land there.
    s = cluster(node("a", 2, cpu=32000), node("b", 2, cpu=9000))
    ca = run(s, "wa", "a", (0,), cpu=8000)
    run(s, "cpu-hog", "b", (), cpu=8500)
    plan = plan_defrag(s, [req("pair", gpus=2, milli=1000)], [ca])
    assert plan.moves == ()
    assert plan.unlocks == ()


def test_limits_cap_moves_and_moves_per_owner() -> None:
    s = cluster(node("a", 4), node("b", 3))
    cands = [run(s, f"w{j}", "a", (j,), owner="team") for j in range(3)]
    wide = [req("four", gpus=4, milli=1000)]
    assert plan_defrag(s, wide, cands, DefragLimits(max_moves=2)).moves == ()
    assert plan_defrag(s, wide, cands, DefragLimits(max_moves=3, max_moves_per_owner=2)).moves == ()
    plan = plan_defrag(s, wide, cands, DefragLimits(max_moves=3, max_moves_per_owner=3))
    assert sorted(moved(plan)) == ["w0", "w1", "w2"]
    assert plan.unlocks[0].node == "a"


def test_total_cost_limit_prefers_the_cheaper_node() -> None:
    s = cluster(node("a", 2), node("b", 2), node("c", 1))
    ca = run(s, "slow", "a", (0,), cost=900)
    cb = run(s, "fast", "b", (0,), cost=30)
    plan = plan_defrag(s, [req("pair", gpus=2, milli=1000)], [ca, cb])
    assert [(m.workload_id, m.from_node) for m in plan.moves] == [("fast", "b")]
    assert plan.unlocks[0].node == "b"
    capped = plan_defrag(
        s, [req("pair", gpus=2, milli=1000)], [ca], DefragLimits(max_total_cost_seconds=600)
    )
    assert capped.moves == ()


def test_slices_are_gathered_to_free_a_card_for_a_whole_gpu_request() -> None:
    s = cluster(node("a", 2), node("b", 1))
    c1 = run(s, "s1", "a", (0,), milli=400, gpu_mem=1000)
    c2 = run(s, "s2", "a", (1,), milli=300, gpu_mem=1000)
    run(s, "s3", "b", (0,), milli=200, gpu_mem=1000)
    plan = plan_defrag(s, [req("card", gpus=2, milli=1000)], [c1, c2])
    assert sorted(moved(plan)) == ["s1", "s2"]
    assert {to for _, to in moved(plan).values()} == {"b"}
    assert plan.unlocks[0].node == "a"


def test_unlocked_request_places_exactly_where_planned_after_apply() -> None:
    s = cluster(node("a", 4), node("b", 4), node("c", 4))
    cands = [run(s, "w1", "a", (1,)), run(s, "w2", "b", (2,)), run(s, "w3", "c", (0, 1))]
    plan = plan_defrag(s, [req("j1", gpus=4, milli=1000), req("j2", gpus=4, milli=1000)], cands)
    after = apply_plan(s, plan)
    assert len(plan.unlocks) >= 1
    for u in plan.unlocks:
        r = req(u.request_id, gpus=4, milli=1000)
        after.apply(make_assignment(after, after.index[u.node], r, u.gpus))


def test_nothing_waiting_gathers_free_cards_onto_whole_nodes() -> None:
    # Moving the 2-GPU workload frees two cards for one move (the 1-GPU one would free one).
    s = cluster(node("a", 4), node("b", 4))
    ca = run(s, "wa", "a", (0,))
    cb = run(s, "wb", "b", (0, 1))
    plan = plan_defrag(s, [], [ca, cb])
    assert moved(plan) == {"wb": ("b", "a")}
    assert plan.freed_whole_nodes == 1
    assert plan.value == "1 move frees 1 whole A100 node."


def test_bad_candidates_are_rejected_with_value_error() -> None:
    s = cluster(node("a", 2))
    ca = run(s, "wa", "a", (0,))
    with pytest.raises(ValueError, match="duplicate"):
        plan_defrag(s, [], [ca, ca])
    with pytest.raises(ValueError, match="unknown node"):
        plan_defrag(s, [], [MoveCandidate("x", "zz", (0,), 1000, 0, 1, 1)])
    with pytest.raises(ValueError):
        plan_defrag(s, [], [MoveCandidate("ghost", "a", (1,), 1000, 0, 1, 1)])


def test_apply_plan_then_policy_placement_uses_the_freed_node() -> None:
    s = cluster(node("a", 8), node("b", 8))
    cands = [run(s, "wa", "a", (3,)), run(s, "wb", "b", (5,))]
    plan = plan_defrag(s, [req("big", gpus=8, milli=1000)], cands)
    after = apply_plan(s, plan)
    policy = POLICIES["tessera"](typical=(), seed=0)
    a = place_one(after, req("big", gpus=8, milli=1000), policy)
    assert a is not None
    assert a.node == plan.unlocks[0].node


def test_plan_counts_a_move_refused_because_the_workload_cannot_land_elsewhere() -> None:
    # Each workload of a fits b's one free card alone, but not both: clearing a cannot be done.
    s = cluster(node("a", 2), node("b", 1))
    cands = [run(s, f"w{j}", "a", (j,)) for j in range(2)]
    plan = plan_defrag(s, [req("pair", gpus=2, milli=1000)], cands)
    assert plan.moves == ()
    assert dict(plan.refusals) == {"relocation_failed": 1}


def test_plan_counts_a_candidate_that_fits_no_other_node() -> None:
    # The 2-GPU workload of a fits nowhere else (b has one card), so clearing a is never tried.
    s = cluster(node("a", 3), node("b", 1))
    ca = run(s, "wide", "a", (0, 1))
    plan = plan_defrag(s, [req("trio", gpus=3, milli=1000)], [ca])
    assert plan.moves == ()
    assert dict(plan.refusals) == {"candidate_fits_nowhere": 1, "request_no_node": 1}
    # nor can a chain help: b holds nothing to move off, so the workload has nowhere to land
    chained = plan_defrag(s, [req("trio", gpus=3, milli=1000)], [ca], DefragLimits(chains=True))
    assert chained.moves == ()
    assert dict(chained.refusals) == {
        "candidate_fits_nowhere": 1,
        "chain_no_landing": 1,
        "request_no_node": 1,
    }


def chained_cluster() -> tuple[ClusterState, list[MoveCandidate]]:
    """a: card 0 free, card 1 held by ``card`` (a whole card that fits no other node); b: one card with a
    0.3 slice ``small``; c: one card with a 0.5 slice that may not move. ``small`` fits c, then ``card``
    fits b, then a holds a 2-GPU request."""
    s = cluster(node("a", 2), node("b", 1), node("c", 1))
    card = run(s, "card", "a", (1,))
    small = run(s, "small", "b", (0,), milli=300, gpu_mem=1000)
    run(s, "pinned", "c", (0,), milli=500, gpu_mem=1000)
    return s, [card, small]


def test_chain_moves_a_slice_away_so_a_whole_card_can_land_and_free_a_node() -> None:
    # issue 21: the card on a fits no other node until small leaves b
    s, cands = chained_cluster()
    plan = plan_defrag(s, [req("pair", gpus=2, milli=1000)], cands, DefragLimits(chains=True))
    assert [(m.workload_id, m.from_node, m.to_node) for m in plan.moves] == [
        ("small", "b", "c"),
        ("card", "a", "b"),
    ]
    assert [(u.request_id, u.node, u.gpus) for u in plan.unlocks] == [("pair", "a", (0, 1))]
    after = apply_plan(s, plan)
    after.apply(make_assignment(after, after.index["a"], req("pair", gpus=2, milli=1000), (0, 1)))


def test_chain_counts_every_move_against_the_limits() -> None:
    s, cands = chained_cluster()
    plan = plan_defrag(
        s, [req("pair", gpus=2, milli=1000)], cands, DefragLimits(max_moves=1, chains=True)
    )
    assert plan.moves == ()
    assert plan.unlocks == ()
    assert dict(plan.refusals)["over_limits"] == 1


def test_without_chains_the_node_stays_blocked() -> None:
    s, cands = chained_cluster()
    plan = plan_defrag(s, [req("pair", gpus=2, milli=1000)], cands)
    assert plan.moves == ()
    assert dict(plan.refusals) == {"candidate_fits_nowhere": 1, "request_no_node": 1}


def test_plan_counts_a_node_the_limits_refuse_to_clear() -> None:
    s = cluster(node("a", 4), node("b", 3))
    cands = [run(s, f"w{j}", "a", (j,), owner="team") for j in range(3)]
    plan = plan_defrag(s, [req("four", gpus=4, milli=1000)], cands, DefragLimits(max_moves=2))
    assert plan.moves == ()
    assert dict(plan.refusals) == {"over_limits": 1}


def test_plan_that_succeeds_counts_no_refusal() -> None:
    s = cluster(node("a", 8, model="H100"), node("b", 8, model="H100"))
    ca = run(s, "wa", "a", (3,))
    cb = run(s, "wb", "b", (5,))
    plan = plan_defrag(s, [req("big", gpus=8, milli=1000)], [ca, cb])
    assert plan.unlocks
    assert plan.refusals == ()
