"""The dynamic replay on small clusters whose outcome can be worked out by hand (no database)."""

from __future__ import annotations

from core.placement import ClusterState, PlacementRequest
from core.placement.tests.builders import cluster, node
from core.simulation import (
    ReplayOptions,
    TeamQuota,
    TimedRequest,
    replay,
    summarize,
)


def whole(rid: str, gpus: int = 1, priority: int = 0) -> PlacementRequest:
    return PlacementRequest(rid, 1000, 1024, gpu_count=gpus, gpu_milli=1000, priority=priority)


def piece(rid: str, milli: int) -> PlacementRequest:
    return PlacementRequest(rid, 1000, 1024, gpu_count=1, gpu_milli=milli)


def starts(result) -> dict[str, int | None]:  # type: ignore[no-untyped-def]
    return {o.request_id: o.start for o in result.outcomes}


def one_gpu() -> ClusterState:
    return cluster(node("n1", 1))


def test_a_request_that_does_not_fit_waits_for_the_departure_that_frees_its_gpu() -> None:
    reqs = [TimedRequest(whole("r1"), 0, 100), TimedRequest(whole("r2"), 10, 50)]
    result = replay(one_gpu(), reqs, ReplayOptions(policy="firstfit", horizon=200))
    assert starts(result) == {"r1": 0, "r2": 100}
    assert [o.end for o in result.outcomes] == [100, 150]
    assert result.times.tolist() == [0, 10, 100, 150]
    assert result.queue_length.tolist() == [0, 1, 0, 0]
    assert result.allocated_gpu_milli.tolist() == [1000, 1000, 1000, 0]
    figures = summarize(result, reqs, window=(0, 200))
    assert figures.allocation_pct == 75.0  # one GPU busy for 150 of 200 s
    assert figures.queue_mean == 0.45  # one request waiting for 90 of 200 s
    assert figures.queue_max == 1
    assert (figures.waits.p50, figures.waits.count, figures.never_started) == (45.0, 2, 0)


def test_a_smaller_later_request_starts_beside_a_waiting_whole_gpu_request() -> None:
    reqs = [
        TimedRequest(piece("half", 500), 0, 100),
        TimedRequest(whole("whole"), 5, 10),
        TimedRequest(piece("quarter", 250), 6, 200),
    ]
    result = replay(one_gpu(), reqs, ReplayOptions(policy="tessera", horizon=1000))
    # the service's cycle lets later requests start when the head does not fit (no head-of-line block)
    assert starts(result) == {"half": 0, "whole": 206, "quarter": 6}


def test_the_higher_priority_request_starts_first_when_capacity_frees() -> None:
    reqs = [
        TimedRequest(whole("running"), 0, 100),
        TimedRequest(whole("older"), 1, 10),
        TimedRequest(whole("urgent", priority=5), 2, 10),
    ]
    result = replay(one_gpu(), reqs, ReplayOptions(policy="firstfit", horizon=1000))
    assert starts(result) == {"running": 0, "older": 110, "urgent": 100}


def test_a_team_at_its_quota_waits_while_another_team_uses_the_free_gpu() -> None:
    reqs = [
        TimedRequest(whole("a1"), 0, 100, team="a"),
        TimedRequest(whole("a2"), 0, 100, team="a"),
        TimedRequest(whole("b1"), 1, 50, team="b"),
    ]
    quotas = (TeamQuota("a", 1000), TeamQuota("b", 1000))
    options = ReplayOptions(policy="firstfit", quotas=quotas, horizon=200)
    result = replay(cluster(node("n1", 2)), reqs, options)
    assert starts(result) == {"a1": 0, "a2": 100, "b1": 1}
    figures = summarize(result, reqs, window=(0, 200))
    shares = {t.team: (t.gpus, t.share_pct, t.quota_pct) for t in figures.teams}
    assert shares == {"a": (1.0, 80.0, 100.0), "b": (0.25, 20.0, 25.0)}


def test_the_team_furthest_below_its_quota_goes_first_even_when_it_asked_later() -> None:
    reqs = [
        TimedRequest(whole("a1"), 0, 100, team="a"),
        TimedRequest(whole("a2"), 0, 50, team="a"),
        TimedRequest(whole("a3"), 1, 10, team="a"),
        TimedRequest(whole("b1"), 2, 10, team="b"),
    ]
    quotas = (TeamQuota("a", 2000), TeamQuota("b", 2000))
    options = ReplayOptions(policy="firstfit", quotas=quotas, horizon=500)
    result = replay(cluster(node("n1", 2)), reqs, options)
    assert starts(result) == {"a1": 0, "a2": 0, "a3": 60, "b1": 50}


def test_requests_no_node_can_hold_and_malformed_requests_never_start() -> None:
    reqs = [
        TimedRequest(whole("too-big", gpus=2), 0, 10),
        TimedRequest(PlacementRequest("bad", 1000, 1024, gpu_count=2, gpu_milli=500), 0, 10),
        TimedRequest(piece("fits", 300), 3, 10),
    ]
    result = replay(one_gpu(), reqs, ReplayOptions(horizon=100))
    assert starts(result) == {"too-big": None, "bad": None, "fits": 3}
    figures = summarize(result, reqs)
    assert figures.never_started == 2
    assert figures.never_started_by_shape == {"2 gpu": 1, "<=50%": 1}


def test_the_default_horizon_is_the_last_submission() -> None:
    reqs = [TimedRequest(whole("r1"), 0, 100), TimedRequest(whole("r2"), 10, 50)]
    result = replay(one_gpu(), reqs, ReplayOptions(policy="firstfit"))
    assert starts(result) == {"r1": 0, "r2": None}
    assert (result.start, result.end) == (0, 10)


def test_the_same_input_gives_the_same_replay_and_the_input_state_is_untouched() -> None:
    nodes = cluster(node("n1", 2), node("n2", 2))
    reqs = [TimedRequest(piece(f"r{i}", 100 * (i % 9 + 1)), i * 3, 40 + i % 7) for i in range(60)]
    first = replay(nodes, reqs, ReplayOptions(policy="random", seed=7, horizon=400))
    second = replay(nodes, reqs, ReplayOptions(policy="random", seed=7, horizon=400))
    assert first.outcomes == second.outcomes
    assert first.allocated_gpu_milli.tolist() == second.allocated_gpu_milli.tolist()
    assert nodes.allocated_gpu_milli == 0


def test_a_cycle_tries_each_waiting_class_once_not_each_waiting_request() -> None:
    reqs = [TimedRequest(whole("big", gpus=1), 0, 1000)]
    reqs += [TimedRequest(whole(f"w{i}"), 1, 5) for i in range(200)]
    reqs += [TimedRequest(piece(f"p{i}", 100), 10 + i, 5) for i in range(5)]
    result = replay(cluster(node("n1", 1)), reqs, ReplayOptions(policy="firstfit", horizon=500))
    # one attempt for "big", one for the class of 200 identical whole-GPU requests, one for the first
    # slice: the 4 later slices join a class that failed with nothing freed since, so they are not tried
    assert result.attempts == 1 + 1 + 1
    assert summarize(result, reqs).never_started == 205


def test_a_gang_starts_all_its_members_together_once_they_all_fit() -> None:
    # given two GPUs, one held until 100 s, and a two-pod gang whose members arrive at 1 s and 2 s
    reqs = [
        TimedRequest(whole("held"), 0, 100),
        TimedRequest(whole("g-0"), 1, 50, gang="g"),
        TimedRequest(whole("g-1"), 2, 50, gang="g"),
        TimedRequest(piece("small", 500), 3, 20),
    ]
    result = replay(cluster(node("n1", 2)), reqs, ReplayOptions(policy="firstfit", horizon=500))
    # then no member takes the free GPU alone: a later small request uses it meanwhile, and both
    # members start when the held GPU and the small request's are free
    assert starts(result) == {"held": 0, "g-0": 100, "g-1": 100, "small": 3}
    assert result.outcomes[1].node == result.outcomes[2].node == "n1"


def test_a_gang_that_would_pass_its_team_quota_waits_for_the_quota_as_a_whole() -> None:
    reqs = [
        TimedRequest(whole("a-solo"), 0, 100, team="a"),
        TimedRequest(whole("g-0"), 1, 10, team="a", gang="g"),
        TimedRequest(whole("g-1"), 1, 10, team="a", gang="g"),
    ]
    options = ReplayOptions(policy="firstfit", quotas=(TeamQuota("a", 2000),), horizon=500)
    result = replay(cluster(node("n1", 3)), reqs, options)
    # three free GPUs, but the gang's 2 GPUs plus a-solo's 1 pass team a's cap of 2 until 100 s
    assert starts(result) == {"a-solo": 0, "g-0": 100, "g-1": 100}


def test_a_gang_missing_a_member_never_starts_partly() -> None:
    reqs = [
        TimedRequest(whole("g-0"), 0, 10, gang="g"),
        TimedRequest(whole("g-1", gpus=9), 0, 10, gang="g"),
    ]
    result = replay(cluster(node("n1", 2)), reqs, ReplayOptions(policy="firstfit", horizon=100))
    # g-1 can never fit (9 GPUs on a 2-GPU node): g-0 does not start alone either
    assert starts(result) == {"g-0": None, "g-1": None}
    assert result.allocated_gpu_milli.tolist() == [0]
