"""The dynamic replay with defragmentation, on clusters small enough to work the outcome out by hand."""

from __future__ import annotations

from core.placement import ClusterState, PlacementRequest
from core.placement.tests.builders import cluster, node
from core.simulation import ReplayOptions, TimedRequest, replay
from core.simulation.defrag import DefragOptions, replay_with_defrag


def whole(rid: str, gpus: int = 1) -> PlacementRequest:
    return PlacementRequest(rid, 1000, 1024, gpu_count=gpus, gpu_milli=1000)


def two_nodes() -> ClusterState:
    return cluster(node("a", 8), node("b", 8))


def fragmented_then_big() -> list[TimedRequest]:
    """16 one-GPU jobs fill both nodes; all but one on each node end at t=10; an 8-GPU job comes at 20."""
    reqs = [TimedRequest(whole(f"j{k}"), 0, 1000 if k in (0, 15) else 10) for k in range(16)]
    reqs.append(TimedRequest(whole("big", 8), 20, 100))
    return reqs


def starts(result) -> dict[str, int | None]:  # type: ignore[no-untyped-def]
    return {o.request_id: o.start for o in result.outcomes}


def test_without_moves_the_eight_gpu_job_waits_for_a_long_job_to_end() -> None:
    result = replay(two_nodes(), fragmented_then_big(), ReplayOptions(policy="firstfit"))
    assert starts(result)["big"] is None  # still waiting at the horizon (the last submission)
    nodes = {o.request_id: o.node for o in result.outcomes}
    assert nodes["j0"] != nodes["j15"]


def test_one_move_lets_the_eight_gpu_job_start_on_arrival() -> None:
    options = ReplayOptions(policy="firstfit", horizon=200)
    result, stats = replay_with_defrag(
        two_nodes(), fragmented_then_big(), options, DefragOptions(moves_per_100_placements=10)
    )
    assert starts(result)["big"] == 20
    assert (stats.moves, stats.unlocked) == (1, 1)
    assert stats.lost_gpu_seconds == 60.0
    # one plan, for the one blocked whole-GPU request, which no node's free slices alone could hold (7 free
    # cards on each node), and no refused move
    assert (stats.plans, stats.blocked_whole, stats.fragment_fit_whole) == (1, 1, 0)
    assert stats.refusals == ()
    # the moved job keeps running on the other node, until its own end
    ends = {o.request_id: o.end for o in result.outcomes}
    assert ends["j0"] == ends["j15"] == 1000


def test_budget_zero_is_the_plain_replay() -> None:
    options = ReplayOptions(policy="tessera", horizon=2000)
    plain = replay(two_nodes(), fragmented_then_big(), options)
    result, stats = replay_with_defrag(
        two_nodes(), fragmented_then_big(), options, DefragOptions(moves_per_100_placements=0)
    )
    assert result.outcomes == plain.outcomes
    assert stats.moves == 0


def test_too_small_a_budget_earns_no_move_before_enough_placements() -> None:
    # 16 placements at 5 moves per 100 earn 0.8 of a move: not enough for the one move needed.
    options = ReplayOptions(policy="firstfit", horizon=200)
    result, stats = replay_with_defrag(
        two_nodes(), fragmented_then_big(), options, DefragOptions(moves_per_100_placements=5)
    )
    assert starts(result)["big"] is None
    assert stats.moves == 0


def test_replay_sums_the_planners_refusals_when_no_move_can_help() -> None:
    # 15 long one-GPU jobs on 16 cards: the 7 beside the free card fit nowhere else (not candidates), and
    # the 8 of the full node cannot all be re-placed on the one free card.
    reqs = [TimedRequest(whole(f"j{k}"), 0, 1000) for k in range(9)]
    reqs += [TimedRequest(whole(f"late{k}"), 5, 1000) for k in range(6)]
    reqs.append(TimedRequest(whole("big", 8), 20, 100))
    options = ReplayOptions(policy="firstfit", horizon=200)
    result, stats = replay_with_defrag(
        two_nodes(), reqs, options, DefragOptions(moves_per_100_placements=100)
    )
    assert starts(result)["big"] is None
    assert stats.moves == 0
    assert (stats.plans, stats.blocked_whole, stats.fragment_fit_whole) == (1, 1, 0)
    assert dict(stats.refusals) == {"candidate_fits_nowhere": 7, "relocation_failed": 1}
