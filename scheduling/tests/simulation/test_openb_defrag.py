"""`bench.defrag` on a small openb trace (every few pods of `multigpu50` on its first 120 nodes, load 0.5):
the goal table it prints (issue 21), pinned, and the goal's rule on made-up rows. Needs the shared traces
for the first test."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from bench.defrag import Goal, goals, main, run_trace
from scheduling.tests.traces import NODE_LIST, TOOL, TRACE_DIR, pod_list, require_traces


def small_args(**over: Any) -> argparse.Namespace:
    values: dict[str, Any] = {
        "trace_dir": str(TRACE_DIR),
        "seed": 42,
        "hours": 1.0,
        "budgets": [1.0],
        "move_cost": 60,
        "retry_after": 100,
        "chains": False,
        "steady_from": 0.2,
        "nodes": 120,
        "pods": 1200,
    }
    values.update(over)
    return argparse.Namespace(**values)


def test_one_move_per_100_placements_starts_the_multi_gpu_jobs_fragments_kept_waiting() -> None:
    require_traces(NODE_LIST, TOOL, pod_list("multigpu50"))
    rows = run_trace(small_args(), "multigpu50", 0.5)
    assert [r["run"] for r in rows] == ["fgd", "tessera", "tessera+1"]
    (goal,) = goals(rows, 1.0)
    # Without moves 5 whole-GPU requests never start (multi-GPU jobs no node has whole cards for);
    # with one move per 100 placements every one of them does, for 11 moves.
    assert (goal.never_before, goal.never_after) == (5, 0)
    assert rows[2]["moves"] == 11
    assert goal.wait_before == pytest.approx(12.5, abs=0.05)
    assert goal.wait_after == pytest.approx(1.4, abs=0.05)
    # the multi-GPU requests alone: 58 s -> 6 s
    assert goal.multi_before == pytest.approx(58.4, abs=0.05)
    assert goal.multi_after == pytest.approx(6.0, abs=0.05)
    assert goal.by_waits
    assert goal.met
    assert not goal.by_allocation
    assert goal.alloc_pts == pytest.approx(0.61, abs=0.005)


def _goal(**over: Any) -> Goal:
    values: dict[str, Any] = {
        "load": 0.7,
        "trace": "t",
        "budget": 1.0,
        "alloc_pts": 0.0,
        "net_pts": 0.0,
        "wait_before": 100.0,
        "wait_after": 100.0,
        "never_before": 0,
        "never_after": 0,
        "headroom_pts": 1.0,
    }
    values.update(over)
    return Goal(**values)


def test_the_goal_is_two_points_of_allocation_or_whole_gpu_waits_at_most_halved() -> None:
    assert _goal(alloc_pts=2.0).met
    assert not _goal(alloc_pts=1.99).met
    assert _goal(wait_after=50.0).met
    assert not _goal(wait_after=50.1).met
    # Nothing waited without moves: there is nothing to halve.
    nothing = _goal(wait_before=0.0, wait_after=0.0)
    assert nothing.wait_ratio is None
    assert not nothing.met


def test_the_goal_table_reads_the_goal_budget_against_tessera_without_moves() -> None:
    def row(run: str, alloc: float, wait: float, never: int) -> dict[str, Any]:
        return {
            "load": 0.5,
            "trace": "t",
            "run": run,
            "alloc_pct": alloc,
            "net_alloc_pct": alloc - 0.1,
            "whole": {"mean_all": wait, "never": never},
            "headroom_pts": 3.0,
        }

    rows = [row("fgd", 70.0, 9.0, 1), row("tessera", 71.0, 10.0, 2), row("tessera+1", 73.5, 8.0, 1)]
    (goal,) = goals(rows, 1.0)
    assert (goal.alloc_pts, goal.wait_ratio, goal.never_before, goal.never_after) == (
        2.5,
        0.8,
        2,
        1,
    )
    assert goal.by_allocation
    assert not goal.by_waits
    assert goals(rows, 2.0) == []


def test_bad_loads_are_refused_naming_the_option() -> None:
    with pytest.raises(SystemExit, match="--loads: each between 0.05 and 2"):
        main(["--loads", "0.5,7"])
    with pytest.raises(SystemExit, match="--budgets: a comma-separated list of numbers"):
        main(["--budgets", "one"])


def test_saved_runs_are_reported_again_without_replaying(tmp_path: Any, capsys: Any) -> None:
    rows = [
        {
            "trace": "t",
            "load": 0.5,
            "run": run,
            "alloc_pct": 60.0,
            "net_alloc_pct": 60.0,
            "steady_alloc_pct": 70.0,
            "steady_from_s": 10,
            "window_s": 100,
            "whole": {"mean": 1.0, "p90": 2.0, "mean_all": wait, "never": never},
            "steady_whole": {"mean": 1.0},
            "never": never,
            "moves": 3 if run != "tessera" else 0,
            "moves_per_100": 1.0,
            "unlocked": 1,
            "seconds": 1.0,
            "plans": 0,
            "headroom_pts": 0.5,
            "steady_headroom_pts": 0.6,
        }
        for run, wait, never in (("tessera", 10.0, 2), ("tessera+1", 4.0, 0))
    ]
    saved = tmp_path / "runs.json"
    saved.write_text(json.dumps(rows))
    assert main(["--report", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "2 runs read from 1 file(s)" in out
    goal_line = out.splitlines()[-2]
    assert goal_line.split()[:5] == ["0.50", "t", "+0.00", "+0.00", "0.50"]
    assert "10.0 →    4.0 (0.40)" in goal_line
    assert goal_line.endswith("| met (waits)")
    assert "met on 1 of 1 (load, trace) pairs" in out


def test_a_saved_file_that_is_not_runs_is_refused_naming_it(tmp_path: Any) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"trace": "t"}]))
    with pytest.raises(SystemExit, match=r"--report .*bad.json: a run lacks alloc_pct"):
        main(["--report", str(bad)])
    bad.write_text("{")
    with pytest.raises(SystemExit, match=r"--report .*bad.json: cannot read it"):
        main(["--report", str(bad)])
