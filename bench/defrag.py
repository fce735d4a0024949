"""Defragmentation on the dynamic replay of the openb traces (protocol: docs/engine.md, "Defragmentation").

    python -m bench.defrag [--traces default,multigpu50] [--budgets 0,0.5,1,2] [--seed 42]
                           [--loads 0.5,0.7,0.9] [--hours 1] [--move-cost 60] [--retry-after 100] [--chains]
                           [--steady-from 0.2] [--nodes N] [--pods N] [--json PATH]

Same workload as ``bench.dynamic`` (its :func:`~bench.dynamic.load_workload`), one process. Per load
and trace it replays FGD and Tessera without moves, then Tessera with defragmentation at each budget (moves per 100
placements), and prints time-weighted allocation (as held, and net of the GPU-seconds moved work loses),
the waits of whole-GPU requests and the never-started ones, each as a difference or ratio against Tessera
without moves measured in the same run, plus the replay's CPU time as a ratio. Under the table, per trace,
the headroom of Tessera without moves (:func:`~core.simulation.idle_while_waiting_pct`): the points of
allocation that idle GPU compute while GPU requests waited could add at most, whatever moves are made.

Two windows: the whole one, from the first arrival (the cluster starts empty, so the ramp-up weighs on it,
and moves cannot help while nothing waits), and the **steady state**, from the arrival at the
``--steady-from`` quantile of submissions (default 0.2: after the first 20 % of arrivals) to the last
arrival. Allocation, headroom and the whole-GPU waits are printed for both (the steady-state waits are
those of the whole-GPU requests submitted inside it).

Last, the **goal** table (issue 21): per load and trace, at ``--goal-budget`` moves per 100 placements
(default 1), whether time-weighted allocation rose by at least 2 points over Tessera without moves, or the
waits of whole-GPU requests were at least halved. The wait compared is the mean over every whole-GPU
request submitted, a request that never started counting as waiting until the horizon (``all*``): the mean
over started requests alone would reward leaving the longest waiters unstarted.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.dynamic import DRAIN, load_workload
from bench.replay import load_nodes, load_tool, to_request
from core.placement import ClusterState, typical_pods
from core.placement.defrag import REFUSALS
from core.simulation import (
    ReplayOptions,
    TimedRequest,
    idle_while_waiting_pct,
    replay,
    summarize,
)
from core.simulation.defrag import DefragOptions, replay_with_defrag

TRACES = ("default", "multigpu50", "gpushare40")
BUDGETS = (0.0, 0.5, 1.0, 2.0)
#: Offered loads (share of capacity, see :func:`~bench.dynamic.load_workload`): a cluster that is
#: usually able to start what arrives, a busy one, and a saturated one.
LOADS = (0.5, 0.7, 0.9)
#: Issue 21's goal at the goal budget: this many points of allocation, or the whole-GPU waits times this.
GOAL_POINTS = 2.0
GOAL_WAIT_RATIO = 0.5
#: Longest wait (placements) after a fruitless plan that --retry-after accepts.
MAX_RETRY_AFTER = 1_000_000


#: Default share of arrivals before the steady-state window begins.
STEADY_FROM = 0.2


def whole_gpu_waits(
    requests: Sequence[TimedRequest],
    outcomes: Sequence[Any],
    horizon: int,
    submitted_from: int = 0,
    min_gpus: int = 1,
) -> dict[str, float]:
    """Whole-GPU requests of at least ``min_gpus`` cards submitted at ``submitted_from`` or later, one
    wait per request: mean, p90 and p95 of those that started, how many never did, and the mean and p90
    of all of them counting a request that never started as waiting until the horizon."""
    pairs = [
        (t, o)
        for t, o in zip(requests, outcomes, strict=True)
        if t.request.is_whole_gpu and t.request.gpu_count >= min_gpus and t.submit >= submitted_from
    ]
    waits = [o.wait for _, o in pairs if o.wait is not None]
    censored = [o.wait if o.wait is not None else horizon - t.submit for t, o in pairs]
    return {
        "count": len(pairs),
        "mean": float(np.mean(waits)) if waits else 0.0,
        "p90": float(np.percentile(waits, 90)) if waits else 0.0,
        "p95": float(np.percentile(waits, 95)) if waits else 0.0,
        "never": len(pairs) - len(waits),
        "mean_all": float(np.mean(censored)) if censored else 0.0,
        "p90_all": float(np.percentile(censored, 90)) if censored else 0.0,
    }


def steady_start(requests: Sequence[TimedRequest], share: float) -> int:
    """The submission time at the ``share`` quantile of all submissions (0: the first)."""
    submits = np.sort(np.fromiter((t.submit for t in requests), np.int64, len(requests)))
    k = min(len(submits) - 1, int(share * len(submits)))
    return int(submits[k])


def run_trace(args: argparse.Namespace, trace: str, load: float) -> list[dict[str, Any]]:
    trace_dir = Path(args.trace_dir)
    nodes = load_nodes(trace_dir)[: args.nodes]
    tool = load_tool(trace_dir.parent.parent / "tools" / "openb_workload.py")
    gpus = sum(len(n.gpus) for n in nodes)
    wl = load_workload(trace_dir, trace, args.seed, load, 0, gpus, args.hours, args.pods)
    csv_path = trace_dir / f"openb_pod_list_{trace}.csv"
    _, prefix = tool.build(str(csv_path), args.seed, [n.name for n in nodes])
    typical = typical_pods(to_request(p) for p in tool.load_pods(str(csv_path)))
    last = max(t.submit for t in wl.requests)
    steady = steady_start(wl.requests, args.steady_from)
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
        steady_summary = summarize(result, wl.requests, window=(steady, last))
        rows.append(
            {
                "trace": trace,
                "load": load,
                "run": label,
                "requests": len(wl.requests),
                "placements": result.placements,
                "alloc_pct": summary.allocation_pct,
                "net_alloc_pct": summary.allocation_pct - 100 * lost / (capacity * max(1, last)),
                "never": summary.never_started,
                "steady_alloc_pct": steady_summary.allocation_pct,
                "steady_from_s": steady,
                "whole": whole_gpu_waits(wl.requests, result.outcomes, result.end),
                "multi": whole_gpu_waits(wl.requests, result.outcomes, result.end, min_gpus=2),
                "steady_whole": whole_gpu_waits(wl.requests, result.outcomes, result.end, steady),
                "plans": plans,
                "moves": moves,
                "unlocked": unlocked,
                "blocked_whole": blocked_whole,
                "fragment_fit_whole": fragment_fit,
                "refusals": refusals,
                "moves_per_100": 100 * moves / max(1, result.placements),
                "headroom_pts": idle_while_waiting_pct(result, wl.requests, window=(0, last)),
                "steady_headroom_pts": idle_while_waiting_pct(
                    result, wl.requests, window=(steady, last)
                ),
                "seconds": seconds,
                "window_s": last,
            }
        )
        print(f"  {trace} at {load:g} {label}: {seconds:.1f} s", flush=True)
    return rows


def groups(
    rows: Sequence[dict[str, Any]],
) -> Iterator[tuple[float, str, dict[str, Any], list[dict[str, Any]]]]:
    """Per (load, trace) in run order: the load, the trace, its Tessera-without-moves row (the
    reference every Δ and × is measured against) and all its rows."""
    for load, trace in dict.fromkeys((r["load"], r["trace"]) for r in rows):
        mine = [r for r in rows if r["load"] == load and r["trace"] == trace]
        yield load, trace, next(r for r in mine if r["run"] == "tessera"), mine


def print_table(rows: list[dict[str, Any]]) -> None:
    """One line per run: allocation over the whole window and the steady state (held, and net of the
    moved work's lost GPU-seconds), whole-GPU waits per request (mean and p90 of those that started, the
    mean counting never-started ones, and the steady-state mean), moves and CPU time, each against
    tessera without moves."""
    print(
        "load trace        run           alloc%  Δpts  Δnet | steady%  Δpts  Δnet | whole-GPU wait"
        " mean (×)  p90 (×)  all* (×)  steady (×) | never(whole)  moves /100pl unlocked  cpu ×"
    )
    for load, trace, ref, mine in groups(rows):
        for r in mine:
            w, rw = r["whole"], ref["whole"]
            sw, rsw = r["steady_whole"], ref["steady_whole"]
            net = r["net_alloc_pct"] - r["alloc_pct"]
            ref_net = ref["net_alloc_pct"] - ref["alloc_pct"]
            d_all = r["alloc_pct"] - ref["alloc_pct"]
            d_ss = r["steady_alloc_pct"] - ref["steady_alloc_pct"]
            # The lost GPU-seconds are spread over the whole window; the steady state bears them all.
            span = max(1, r["window_s"] - r["steady_from_s"])
            ss_net = d_ss + (net - ref_net) * r["window_s"] / span
            print(
                f"{load:4.2f} {trace:<12} {r['run']:<12} {r['alloc_pct']:6.2f} {d_all:+5.2f} "
                f"{d_all + net - ref_net:+5.2f} | {r['steady_alloc_pct']:6.2f} {d_ss:+5.2f} "
                f"{ss_net:+5.2f} | {w['mean']:7.0f} ({_ratio(w['mean'], rw['mean'])})  "
                f"{w['p90']:6.0f} ({_ratio(w['p90'], rw['p90'])})  "
                f"{w['mean_all']:5.0f} ({_ratio(w['mean_all'], rw['mean_all'])})  "
                f"{sw['mean']:5.0f} ({_ratio(sw['mean'], rsw['mean'])}) | "
                f"{r['never']:5d}({w['never']:4d})  {r['moves']:5d} {r['moves_per_100']:5.2f} "
                f"{r['unlocked']:6d}  {r['seconds'] / max(ref['seconds'], 1e-9):5.2f}"
            )


def _ratio(value: float, reference: float) -> str:
    return f"{value / reference:4.2f}" if reference > 0 else "   -"


def print_why(rows: list[dict[str, Any]]) -> None:
    """Why moves are rare: per run with moves, the blocked whole-GPU requests the planner was given (summed
    over plans), the share some node's free slices would hold, and the planner's refusals by reason."""
    reasons = sorted(REFUSALS)
    print("load trace        run          plans blocked-whole frag-fit%  " + "  ".join(reasons))
    for r in rows:
        if not r["plans"]:
            continue
        share = 100 * r["fragment_fit_whole"] / max(1, r["blocked_whole"])
        counts = "  ".join(f"{r['refusals'].get(k, 0):>{len(k)}d}" for k in reasons)
        print(
            f"{r['load']:4.2f} {r['trace']:<12} {r['run']:<12} {r['plans']:5d} "
            f"{r['blocked_whole']:13d} {share:8.1f}%  {counts}"
        )


def print_headroom(rows: list[dict[str, Any]]) -> None:
    """Per load and trace, the headroom of tessera without moves next to what the best budget gained."""
    print(
        "load trace        headroom pts (no moves): all  steady   best Δpts with moves: all  steady"
    )
    for load, trace, ref, mine in groups(rows):
        moved = [r for r in mine if r["run"].startswith("tessera+")]
        gains = [r["alloc_pct"] - ref["alloc_pct"] for r in moved]
        steady = [r["steady_alloc_pct"] - ref["steady_alloc_pct"] for r in moved]
        best = f"{max(gains):+.2f}" if gains else "-"
        best_ss = f"{max(steady):+.2f}" if steady else "-"
        print(
            f"{load:4.2f} {trace:<12} {ref['headroom_pts']:27.2f} {ref['steady_headroom_pts']:7.2f}"
            f"   {best:>24} {best_ss:>7}"
        )


@dataclass(frozen=True)
class Goal:
    """Issue 21's goal for one load and trace, at one budget, against Tessera without moves."""

    load: float
    trace: str
    budget: float
    alloc_pts: float
    net_pts: float
    wait_before: float
    wait_after: float
    never_before: int
    never_after: int
    headroom_pts: float
    #: The same wait for the multi-GPU requests alone (None: not recorded in the run read back).
    multi_before: float | None = None
    multi_after: float | None = None

    @property
    def wait_ratio(self) -> float | None:
        """The whole-GPU wait with moves over the wait without (None: nothing waited without moves)."""
        return self.wait_after / self.wait_before if self.wait_before > 0 else None

    @property
    def by_allocation(self) -> bool:
        return self.alloc_pts >= GOAL_POINTS

    @property
    def by_waits(self) -> bool:
        ratio = self.wait_ratio
        return ratio is not None and ratio <= GOAL_WAIT_RATIO

    @property
    def met(self) -> bool:
        return self.by_allocation or self.by_waits


def goals(rows: Sequence[dict[str, Any]], budget: float) -> list[Goal]:
    """The goal per load and trace that was run at ``budget`` (see the module docstring)."""
    out = []
    label = f"tessera+{budget:g}"
    for load, trace, ref, mine in groups(rows):
        row = next((r for r in mine if r["run"] == label), None)
        if row is None:
            continue
        out.append(
            Goal(
                load=load,
                trace=trace,
                budget=budget,
                alloc_pts=row["alloc_pct"] - ref["alloc_pct"],
                net_pts=row["net_alloc_pct"] - ref["net_alloc_pct"],
                wait_before=ref["whole"]["mean_all"],
                wait_after=row["whole"]["mean_all"],
                never_before=ref["whole"]["never"],
                never_after=row["whole"]["never"],
                headroom_pts=ref["headroom_pts"],
                multi_before=ref["multi"]["mean_all"] if "multi" in ref else None,
                multi_after=row["multi"]["mean_all"] if "multi" in row else None,
            )
        )
    return out


def print_goals(found: Sequence[Goal]) -> None:
    """One line per load and trace: the allocation gain, the whole-GPU waits before and after, and which
    half of the goal (if any) is met; beside them, for reading, the multi-GPU requests' waits alone."""
    print(
        "load trace         Δpts  Δnet  headroom | whole-GPU wait all* s: none → moves (×)"
        "  never-started whole: none → moves | multi-GPU all* s: none → moves (×) | goal"
    )
    for g in found:
        ratio = g.wait_ratio
        verdict = (
            "met (allocation)"
            if g.by_allocation
            else "met (waits)"
            if g.by_waits
            else "not met: nothing waited"
            if ratio is None
            else "not met"
        )
        if g.multi_before is None or g.multi_after is None:
            multi = f"{'-':>34}"
        else:
            multi = (
                f"{g.multi_before:18.1f} → {g.multi_after:6.1f} "
                f"({_ratio(g.multi_after, g.multi_before)})"
            )
        print(
            f"{g.load:4.2f} {g.trace:<12} {g.alloc_pts:+5.2f} {g.net_pts:+5.2f} {g.headroom_pts:9.2f} |"
            f" {g.wait_before:22.1f} → {g.wait_after:6.1f} ({_ratio(g.wait_after, g.wait_before)})"
            f"  {g.never_before:19d} → {g.never_after:5d} | {multi} | {verdict}"
        )
    met = sum(g.met for g in found)
    print(f"met on {met} of {len(found)} (load, trace) pairs")


def _floats(text: str, name: str, low: float, high: float) -> list[float]:
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise SystemExit(f"{name}: a comma-separated list of numbers, got {text!r}") from None
    if not values or any(not low <= v <= high for v in values):
        raise SystemExit(f"{name}: each between {low:g} and {high:g}, got {text!r}")
    return values


def report(rows: list[dict[str, Any]], goal_budget: float) -> None:
    """Every table of the run: the runs, why moves are rare, the headroom and the goal."""
    print(
        "Δ and × are against tessera without moves in the same run; all* counts a whole-GPU request"
    )
    print("that never started as waiting until the horizon; steady (×): mean wait of the whole-GPU")
    print("requests submitted in the steady state that started\n")
    print_table(rows)
    print("\nwhy moves are rare (planner refusals, summed over plans)")
    print_why(rows)
    print(
        "\nheadroom: idle GPU compute while GPU requests waited, capped by their demand (a loose upper"
    )
    print("bound on what moves could add: it ignores GPU models, CPU, memory and shapes)")
    print_headroom(rows)
    print(
        f"\ngoal (issue 21) at {goal_budget:g} move(s) per 100 placements: allocation "
        f"+{GOAL_POINTS:g} points over no moves, or the whole-GPU waits (all*) times "
        f"{GOAL_WAIT_RATIO:g} or less"
    )
    print_goals(goals(rows, goal_budget))


#: Keys a row read back by --report must have: those every table reads (the "why" table's own are read
#: only from runs that made plans).
ROW_KEYS = frozenset(
    {
        "trace",
        "load",
        "run",
        "alloc_pct",
        "net_alloc_pct",
        "steady_alloc_pct",
        "steady_from_s",
        "window_s",
        "whole",
        "steady_whole",
        "never",
        "moves",
        "moves_per_100",
        "unlocked",
        "seconds",
        "plans",
        "headroom_pts",
        "steady_headroom_pts",
    }
)


def read_reports(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The rows saved by earlier runs' ``--json``, in file order; a file that is not such a list
    stops the bench naming the file and what is wrong."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--report {path}: cannot read it ({exc})") from None
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise SystemExit(f"--report {path}: not a list of runs written by --json")
        for r in data:
            missing = ROW_KEYS - r.keys()
            if missing:
                raise SystemExit(f"--report {path}: a run lacks {', '.join(sorted(missing))}")
        rows.extend(data)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.defrag", description=__doc__.split("\n")[0])
    ap.add_argument("--trace-dir", default="../shared/traces/openb")
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--budgets", default=",".join(f"{b:g}" for b in BUDGETS))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument(
        "--loads",
        "--load",
        default=",".join(f"{x:g}" for x in LOADS),
        help="offered loads, comma-separated (share of capacity, 0.05-2)",
    )
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
    ap.add_argument(
        "--steady-from",
        type=float,
        default=STEADY_FROM,
        help="the steady-state window begins at this quantile of arrivals (0-0.9)",
    )
    ap.add_argument(
        "--goal-budget",
        type=float,
        default=1.0,
        help="the budget (moves per 100 placements) the goal table reads; run it among --budgets",
    )
    ap.add_argument("--nodes", type=int, default=None, help="first N nodes only (development)")
    ap.add_argument(
        "--pods", type=int, default=None, help="every k-th pod, at most N (development)"
    )
    ap.add_argument("--json", type=Path, help="write every run's figures to this file")
    ap.add_argument(
        "--report",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="print the tables of runs saved with --json (several files: one table), replaying nothing",
    )
    args = ap.parse_args(argv)
    if not 0 <= args.retry_after <= MAX_RETRY_AFTER:
        ap.error(f"--retry-after: between 0 and {MAX_RETRY_AFTER} placements")
    if not 0 <= args.steady_from <= 0.9:
        ap.error("--steady-from: between 0 and 0.9")
    args.budgets = _floats(args.budgets, "--budgets", 0, 100)
    loads = _floats(args.loads, "--loads", 0.05, 2)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    if args.report:
        rows = read_reports(args.report)
        files = len(args.report)
        print(f"defragmentation on the dynamic replay: {len(rows)} runs read from {files} file(s)")
    else:
        for load in loads:
            for trace in args.traces.split(","):
                done = run_trace(args, trace, load)
                # each trace as soon as it is done (a long run can be read part-way)
                print_table(done)
                rows.extend(done)
        print(
            f"\ndefragmentation on the dynamic replay: seed {args.seed}, loads "
            f"{', '.join(f'{x:.2f}' for x in loads)}, {args.hours:g} h window, move cost "
            f"{args.move_cost} s, retry after {args.retry_after} placements, chains "
            f"{'on' if args.chains else 'off'}, steady state from the {args.steady_from:.0%} "
            f"quantile of arrivals, {time.perf_counter() - t0:.0f} s"
        )
    report(rows, args.goal_budget)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
