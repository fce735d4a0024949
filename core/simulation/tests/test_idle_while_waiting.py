"""The defragmentation headroom of a replay (issue 21): idle GPU compute while GPU requests wait, worked
out by hand on a two-GPU node."""

from __future__ import annotations

from core.placement import PlacementRequest
from core.placement.tests.builders import cluster, node
from core.simulation import (
    ReplayOptions,
    TimedRequest,
    idle_while_waiting_pct,
    replay,
    waiting_gpu_milli,
)


def piece(rid: str, milli: int) -> PlacementRequest:
    return PlacementRequest(rid, 1000, 1024, gpu_count=1, gpu_milli=milli)


def whole(rid: str, gpus: int) -> PlacementRequest:
    return PlacementRequest(rid, 1000, 1024, gpu_count=gpus, gpu_milli=1000)


def fragmented() -> list[TimedRequest]:
    """Two 0.6 slices take one card each, so a 2-GPU job waits from 10 to 100 with 0.8 GPU idle."""
    return [
        TimedRequest(piece("a", 600), 0, 100),
        TimedRequest(piece("b", 600), 0, 100),
        TimedRequest(whole("c", 2), 10, 50),
    ]


def test_waiting_demand_is_counted_from_submission_to_start() -> None:
    reqs = fragmented()
    result = replay(cluster(node("n1", 2)), reqs, ReplayOptions(policy="firstfit", horizon=200))
    assert [o.start for o in result.outcomes] == [0, 0, 100]
    assert result.times.tolist() == [0, 10, 100, 150]
    assert waiting_gpu_milli(result, reqs).tolist() == [0, 2000, 0, 0]


def test_headroom_is_the_idle_compute_while_the_job_waits() -> None:
    reqs = fragmented()
    result = replay(cluster(node("n1", 2)), reqs, ReplayOptions(policy="firstfit", horizon=200))
    # 800 milli idle for 90 s of a 200 s window on 2,000 milli: 18 points.
    assert idle_while_waiting_pct(result, reqs, window=(0, 200)) == 18.0


def test_idle_compute_with_nothing_waiting_is_no_headroom() -> None:
    # Both start at once and leave 0.7 GPU idle all along: nothing waits, so nothing to gain.
    reqs = [TimedRequest(whole("a", 1), 0, 100), TimedRequest(piece("b", 300), 0, 100)]
    result = replay(cluster(node("n1", 2)), reqs, ReplayOptions(policy="firstfit", horizon=100))
    assert [o.start for o in result.outcomes] == [0, 0]
    assert idle_while_waiting_pct(result, reqs, window=(0, 100)) == 0.0


def test_a_request_that_never_starts_counts_only_up_to_the_idle_compute() -> None:
    reqs = [TimedRequest(whole("a", 1), 0, 100), TimedRequest(whole("wide", 3), 0, 100)]
    result = replay(cluster(node("n1", 2)), reqs, ReplayOptions(policy="firstfit", horizon=200))
    assert [o.start for o in result.outcomes] == [0, None]
    assert waiting_gpu_milli(result, reqs).tolist()[0] == 3000
    # 1,000 idle for [0, 100), then 2,000 idle for [100, 200): (1000*100 + 2000*100) / 200 / 2000.
    assert idle_while_waiting_pct(result, reqs, window=(0, 200)) == 75.0


def test_headroom_is_capped_by_what_the_waiting_requests_ask_for() -> None:
    # A 0.5 slice fits neither card's 0.4: it waits from 10 to 100 asking 500 of the 800 idle milli.
    reqs = [*fragmented()[:2], TimedRequest(piece("c", 500), 10, 50)]
    result = replay(cluster(node("n1", 2)), reqs, ReplayOptions(policy="firstfit", horizon=200))
    assert [o.start for o in result.outcomes] == [0, 0, 100]
    assert idle_while_waiting_pct(result, reqs, window=(0, 200)) == 11.25
