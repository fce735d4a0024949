"""Defragmentation on the dynamic replay of the openb traces (protocol: docs/engine.md, "Defragmentation").

    python -m bench.defrag [--traces default,multigpu50] [--budgets 0,0.5,1,2] [--seed 42] [--load 0.9]
                           [--hours 1] [--move-cost 60] [--retry-after 100] [--chains]
                           [--nodes N] [--pods N] [--json PATH]

Same workload as ``bench.dynamic`` (its :func:`~bench.dynamic.load_workload`), one process. Per trace it
replays FGD and Tessera without moves, then Tessera with defragmentation at each budget (moves per 100
placements), and prints time-weighted allocation (as held, and net of the GPU-seconds moved work loses),
the waits of whole-GPU requests and the never-started ones, each as a difference or ratio against Tessera
without moves measured in the same run, plus the replay's CPU time as a ratio. Under the table, per trace,
the headroom of Tessera without moves (:func:`~scheduling.simulation.idle_while_waiting_pct`): the points of
allocation that idle GPU compute while GPU requests waited could add at most, whatever moves are made.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.dynamic import DRAIN, load_workload
from bench.replay import load_nodes, load_tool, to_request
from scheduling.engine import ClusterState, typical_pods
from scheduling.engine.defrag import REFUSALS
from scheduling.simulation import (
    ReplayOptions,
    TimedRequest,
    idle_while_waiting_pct,
    replay,
    summarize,
)
from scheduling.simulation.defrag import DefragOptions, replay_with_defrag

TRACES = ("default", "multigpu50", "gpushare40")
BUDGETS = (0.0, 0.5, 1.0, 2.0)
#: Longest wait (placements) after a fruitless plan that --retry-after accepts.
MAX_RETRY_AFTER = 1_000_000


def whole_gpu_waits(
    requests: Sequence[TimedRequest], outcomes: Sequence[Any], horizon: int
) -> dict[str, float]:
    """Whole-GPU requests: mean and p95 wait of those that started, how many never did, and the mean
    wait of all of them counting a request that never started as waiting until the horizon."""
    pairs = [(t, o) for t, o in zip(requests, outcomes, strict=True) if t.request.is_whole_gpu]
    waits = [o.wait for _, o in pairs if o.wait is not None]
    censored = [o.wait if o.wait is not None else horizon - t.submit for t, o in pairs]
    return {
        "count": len(pairs),
        "mean": float(np.mean(waits)) if waits else 0.0,
        "p95": float(np.percentile(waits, 95)) if waits else 0.0,
        "never": len(pairs) - len(waits),
        "mean_all": float(np.mean(censored)) if censored else 0.0,
    }


def run_trace(args: argparse.Namespace, trace: str) -> list[dict[str, Any]]:
    trace_dir = Path(args.trace_dir)
    nodes = load_nodes(trace_dir)[: args.nodes]
    tool = load_tool(trace_dir.parent.parent / "tools" / "openb_workload.py")
    gpus = sum(len(n.gpus) for n in nodes)
    wl = load_workload(trace_dir, trace, args.seed, args.load, 0, gpus, args.hours, args.pods)
    csv_path = trace_dir / f"openb_pod_list_{trace}.csv"
    _, prefix = tool.build(str(csv_path), args.seed, [n.name for n in nodes])
    typical = typical_pods(to_request(p) for p in tool.load_pods(str(csv_path)))
    last = max(t.submit for t in wl.requests)
    base = ReplayOptions(
        policy="tessera",
        seed=args.seed,
        typical=typical,
        node_priority=tuple(prefix[n.name] for n in nodes),
        horizon=last + int(last * DRAIN),
    )
    state = ClusterState.from_nodes(nodes)
    capacity = int(state.gpu_ok.sum())
    rows = []
    runs: list[tuple[str, str, float | None]] = [("fgd", "fgd", None), ("tessera", "tessera", None)]
    runs += [(f"tessera+{b:g}", "tessera", b) for b in args.budgets]
    for label, policy, budget in runs:
        options = replace(base, policy=policy)
        c0 = time.process_time()
        if budget is None:
            result = replay(state, wl.requests, options)
            plans = moves = unlocked = blocked_whole = fragment_fit = 0
            lost = 0.0
            refusals: dict[str, int] = {}
        else:
            defrag = DefragOptions(
                moves_per_100_placements=budget,
                move_cost_seconds=args.move_cost,
                retry_after_placements=args.retry_after,
                chains=args.chains,
            )
            result, stats = replay_with_defrag(state, wl.requests, options, defrag)
            plans, moves, unlocked, lost = (
                stats.plans,
                stats.moves,
                stats.unlocked,
                stats.lost_gpu_seconds,
            )
            blocked_whole, fragment_fit = stats.blocked_whole, stats.fragment_fit_whole
            refusals = dict(stats.refusals)
        seconds = time.process_time() - c0
        summary = summarize(result, wl.requests, window=(0, last))
        rows.append(
            {
                "trace": trace,
                "run": label,
                "requests": len(wl.requests),
                "placements": result.placements,
                "alloc_pct": summary.allocation_pct,
                "net_alloc_pct": summary.allocation_pct - 100 * lost / (capacity * max(1, last)),
                "never": summary.never_started,
                "whole": whole_gpu_waits(wl.requests, result.outcomes, result.end),
                "plans": plans,
                "moves": moves,
                "unlocked": unlocked,
                "blocked_whole": blocked_whole,
                "fragment_fit_whole": fragment_fit,
                "refusals": refusals,
                "moves_per_100": 100 * moves / max(1, result.placements),
                "headroom_pts": idle_while_waiting_pct(result, wl.requests, window=(0, last)),
                "seconds": seconds,
            }
        )
        print(f"  {trace} {label}: {seconds:.1f} s", flush=True)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        "trace        run           alloc%  Δpts   net%   Δnet  whole-GPU wait: started mean (×)  "
        "p95 (×)  all* mean (×)  never(whole)  moves /100pl unlocked  cpu ×"
    )
    for trace in dict.fromkeys(r["trace"] for r in rows):
        ref = next(r for r in rows if r["trace"] == trace and r["run"] == "tessera")
        for r in (x for x in rows if x["trace"] == trace):
            w, rw = r["whole"], ref["whole"]
            print(
                f"{trace:<12} {r['run']:<12} {r['alloc_pct']:6.2f} {r['alloc_pct'] - ref['alloc_pct']:+5.2f} "
                f"{r['net_alloc_pct']:6.2f} {r['net_alloc_pct'] - ref['net_alloc_pct']:+5.2f}  "
                f"{w['mean']:7.0f} ({w['mean'] / max(rw['mean'], 1e-9):4.2f})  "
                f"{w['p95']:6.0f} ({w['p95'] / max(rw['p95'], 1e-9):4.2f})  "
                f"{w['mean_all']:6.0f} ({w['mean_all'] / max(rw['mean_all'], 1e-9):4.2f})  "
                f"{r['never']:5d}({w['never']:4d})  {r['moves']:5d} {r['moves_per_100']:5.2f} "
                f"{r['unlocked']:6d}  {r['seconds'] / max(ref['seconds'], 1e-9):5.2f}"
            )


def print_why(rows: list[dict[str, Any]]) -> None:
    """Why moves are rare: per run with moves, the blocked whole-GPU requests the planner was given (summed
    over plans), the share some node's free slices would hold, and the planner's refusals by reason."""
    reasons = sorted(REFUSALS)
    print("trace        run          plans blocked-whole frag-fit%  " + "  ".join(reasons))
    for r in rows:
        if not r["plans"]:
            continue
        share = 100 * r["fragment_fit_whole"] / max(1, r["blocked_whole"])
        counts = "  ".join(f"{r['refusals'].get(k, 0):>{len(k)}d}" for k in reasons)
        print(
            f"{r['trace']:<12} {r['run']:<12} {r['plans']:5d} {r['blocked_whole']:13d} "
            f"{share:8.1f}%  {counts}"
        )


def print_headroom(rows: list[dict[str, Any]]) -> None:
    """Per trace, the headroom of tessera without moves next to what the best budget gained."""
    print("trace        headroom pts (no moves)  best Δpts with moves")
    for trace in dict.fromkeys(r["trace"] for r in rows):
        ref = next(r for r in rows if r["trace"] == trace and r["run"] == "tessera")
        gains = [
            r["alloc_pct"] - ref["alloc_pct"]
            for r in rows
            if r["trace"] == trace and r["run"].startswith("tessera+")
        ]
        best = f"{max(gains):+.2f}" if gains else "-"
        print(f"{trace:<12} {ref['headroom_pts']:23.2f}  {best:>20}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.defrag", description=__doc__.split("\n")[0])
    ap.add_argument("--trace-dir", default="../shared/traces/openb")
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--budgets", default=",".join(f"{b:g}" for b in BUDGETS))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--move-cost", type=int, default=60)
    ap.add_argument(
        "--retry-after",
        type=int,
        default=DefragOptions().retry_after_placements,
        help="placements before a plan is tried again after one that found no move",
    )
    ap.add_argument(
        "--chains",
        action="store_true",
        help="let the planner chain two moves (DefragLimits.chains)",
    )
    ap.add_argument("--nodes", type=int, default=None, help="first N nodes only (development)")
    ap.add_argument(
        "--pods", type=int, default=None, help="every k-th pod, at most N (development)"
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not 0 <= args.retry_after <= MAX_RETRY_AFTER:
        ap.error(f"--retry-after: between 0 and {MAX_RETRY_AFTER} placements")
    args.budgets = [float(b) for b in args.budgets.split(",")]
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for trace in args.traces.split(","):
        done = run_trace(args, trace)
        print_table(done)  # each trace as soon as it is done (a long run can be read part-way)
        rows.extend(done)
    print(
        f"\ndefragmentation on the dynamic replay: seed {args.seed}, load {args.load:.2f}, "
        f"{args.hours:g} h window, move cost {args.move_cost} s, retry after {args.retry_after} "
        f"placements, chains {'on' if args.chains else 'off'}, {time.perf_counter() - t0:.0f} s"
    )
    print(
        "Δ and × are against tessera without moves in the same run; all* counts a whole-GPU request"
    )
    print("that never started as waiting until the horizon\n")
    print_table(rows)
    print("\nwhy moves are rare (planner refusals, summed over plans)")
    print_why(rows)
    print(
        "\nheadroom: idle GPU compute while GPU requests waited, capped by their demand (a loose upper"
    )
    print("bound on what moves could add: it ignores GPU models, CPU, memory and shapes)")
    print_headroom(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
