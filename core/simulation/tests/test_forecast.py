"""Estimated start times from recorded durations, worked out by hand (no database)."""

from __future__ import annotations

from core.placement import Assignment, PlacementRequest
from core.placement.tests.builders import cluster, node
from core.simulation import (
    DurationModel,
    ReplayOptions,
    Running,
    RunningWork,
    TimedRequest,
    estimate_starts,
)

TRAIN = DurationModel({"train": tuple(range(100, 1001, 100))})  # 100, 200, ..., 1000 s


def whole(rid: str) -> PlacementRequest:
    return PlacementRequest(rid, 1000, 1024, gpu_count=1, gpu_milli=1000)


def test_remaining_time_is_a_quantile_of_the_recorded_durations_longer_than_the_elapsed_time() -> (
    None
):
    # longer than 150 s: 200..1000; their 10 % / 90 % quantiles are 280 and 920
    assert TRAIN.remaining("train", 150, 0.1) == 130
    assert TRAIN.remaining("train", 150, 0.9) == 770
    # an unknown group uses every recorded duration; past the longest one: as long again (high)
    assert TRAIN.remaining("other", 0, 0.1) == 190
    assert TRAIN.remaining("train", 2000, 0.9) == 2000
    assert TRAIN.remaining("train", 2000, 0.1) == 1


def test_waiting_requests_get_the_range_between_early_and_late_ends_of_the_work_ahead() -> None:
    state = cluster(node("n1", 1))
    held = Assignment("r0", "n1", (0,), 1000, 40960, 1000, 1024)
    state.apply(held)
    running = [RunningWork(Running(held, end=10**6), started=0, group="train")]
    waiting = [
        (TimedRequest(whole("w1"), 120, 0), "train"),
        (TimedRequest(whole("w2"), 140, 0), "train"),
    ]
    out = estimate_starts(state, running, waiting, TRAIN, 150, ReplayOptions(policy="firstfit"))
    w1, w2 = out["w1"], out["w2"]
    # r0 ends 130 s (early) or 770 s (late) from now; w2 then waits for w1's own run: r0, still
    # running after 150 s, counts as a run of at least 150 s, so w1's run is the Kaplan-Meier 10 % /
    # 90 % quantile of 100..1000 and ">= 150": 200 s / 1000 s
    assert (w1.earliest, w1.latest, w1.position) == (280, 920, 1)
    assert (w2.earliest, w2.latest, w2.position) == (480, 1920, 2)
    assert w1.reason.startswith("0 ahead in the queue; ")
    assert w2.reason.startswith("1 ahead in the queue; ")
    assert "GPU" in w1.reason
    assert state.allocated_gpu_milli == 1000  # the forecast never changes the state it is given


def test_a_request_no_node_can_hold_has_no_estimate() -> None:
    state = cluster(node("n1", 1))
    big = PlacementRequest("big", 1000, 1024, gpu_count=2, gpu_milli=1000)
    out = estimate_starts(state, [], [(TimedRequest(big, 0, 0), "train")], TRAIN, 10)
    assert (out["big"].earliest, out["big"].latest) == (None, None)


def test_work_still_running_counts_as_a_run_at_least_as_long_as_it_has_run() -> None:
    # given runs of 100..1000 s that ended, and three of the group still running after 2000 s
    model = DurationModel({"train": tuple(range(100, 1001, 100))}).with_running(
        [("train", 2000), ("train", 2000), ("train", 2000)]
    )
    # then a new run's 90 % quantile is not 910 s any more: 3 of 13 runs last over 2000 s, so the
    # Kaplan-Meier estimate never reaches 90 % and the late bound is the longest run seen
    assert model.remaining("train", 0, 0.9) == 2000
    assert model.remaining("train", 0, 0.1) == 200  # the first 1/13 ≈ 7.7 % end at 100 s
    # and work 1500 s in (past every ended run) is expected to run at least as long again
    assert model.remaining("train", 1500, 0.9) == 1500
    assert model.remaining("train", 1500, 0.1) == 1


def test_the_most_specific_duration_group_with_enough_history_is_used() -> None:
    model = DurationModel(
        {"template:a": (7200,) * 5, "team:x": (600,) * 5, "template:b": (60,) * 2}
    )
    assert model.remaining(("template:a", "team:x"), 0, 0.5) == 7200
    # two runs are not enough for template b: its team's are used
    assert model.remaining(("template:b", "team:x"), 0, 0.5) == 600
    # no history in any of its groups: every recorded run together (5 + 5 + 2)
    assert model.remaining(("template:c", "team:y"), 0, 0.5) == 600
