"""Dynamic replay of the openb traces: arrivals, queues, waits and departures (protocol: docs/engine.md).

    python -m bench.dynamic [--traces default,gpuspec33] [--policies tessera,fgd,bestfit,firstfit]
                            [--seed 42] [--load 0.9] [--hours 1] [--teams 0] [--probes 4]
                            [--probe-policy tessera] [--jobs 2] [--json PATH]

Each pod arrives at its ``creation_time`` and runs for its recorded time (``deletion_time`` minus its
start), on the 1,213 GPU nodes, with the service's queue order and the chosen policy
(:mod:`core.simulation`). The trace's own load is tiny (a peak of ~66 of 6,212 GPUs), so its
arrivals are mapped onto a window of ``--hours`` (durations kept) and seeded clones are added until the
offered GPU load is ``--load`` times the capacity (see :func:`load_workload`). Prints allocation, queue,
waits by shape, never started, the start-time forecast's coverage (``--probes`` snapshots of the
``--probe-policy`` run) and the replay's CPU time, side by side per policy.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.replay import DEFAULT_TRACES, every_kth, load_nodes, load_tool, to_request
from core.placement import ClusterState, typical_pods
from core.simulation import (
    CycleView,
    DurationModel,
    ReplayOptions,
    Running,
    RunningWork,
    TeamQuota,
    TimedRequest,
    estimate_starts,
    replay,
    shape_label,
    summarize,
)

POLICIES = ("tessera", "fgd", "bestfit", "firstfit")
#: After the last arrival the replay goes on for this share of the window; what has not started by
#: then counts as never started.
DRAIN = 0.25
#: The share of arrivals before the busy part of the trace that arrive at its start (see the protocol).
WINDOW_QUANTILE = 0.01


@dataclass(frozen=True)
class Workload:
    """A trace as timed requests, with the compression applied and what it was."""

    trace: str
    requests: tuple[TimedRequest, ...]
    compression: float
    borrowed_times: int


def _times(row: dict[str, str]) -> tuple[int, int, int | None]:
    """(creation, deletion, scheduled or None) of a pod row."""
    scheduled = row.get("scheduled_time") or ""
    return (
        int(row["creation_time"]),
        int(row["deletion_time"]),
        int(scheduled) if scheduled else None,
    )


def load_workload(
    trace_dir: Path,
    trace: str,
    seed: int,
    load: float,
    teams: int,
    capacity_gpus: int,
    hours: float = 1.0,
    limit: int | None = None,
) -> Workload:
    """The timed requests of ``trace``: its pods at their (compressed) times, plus seeded clones until
    the offered load is ``load``.

    Pods of a trace without time columns (``multigpu50``) take the times of the pod of the same name in
    ``default`` (the first 8,152 are the same pods); the others draw the times of a ``default`` pod
    (seeded). Duration = deletion − start (the scheduled time, or the creation for pods that never ran),
    at least one second, never compressed. The busy part of the trace begins at the arrivals' 1 %
    quantile (earlier pods arrive at its start) and is mapped linearly onto a window of ``hours``.
    Clones (like the static protocol's tune-up to 130 %): the shape and duration of a uniformly drawn
    pod, arriving at the time of another uniformly drawn pod, added until the GPU-seconds asked inside
    the window (each run cut at the window's end) reach ``load`` × capacity × window. ``limit``: every
    k-th pod only, at most ``limit`` (a small trace with the same spread in time, for the tests).
    """
    tool = load_tool(trace_dir.parent.parent / "tools" / "openb_workload.py")
    path = trace_dir / f"openb_pod_list_{trace}.csv"
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    pods = tool.load_pods(str(path))
    rows, pods = every_kth(rows, limit), every_kth(pods, limit)
    rng = np.random.default_rng(seed)
    borrowed = 0
    if rows and "creation_time" not in rows[0]:
        with open(trace_dir / "openb_pod_list_default.csv") as fh:
            base = list(csv.DictReader(fh))
        by_name = {r["name"]: _times(r) for r in base}
        times = []
        for r in rows:
            if r["name"] in by_name:
                times.append(by_name[r["name"]])
            else:
                times.append(_times(base[int(rng.integers(len(base)))]))
                borrowed += 1
    else:
        times = [_times(r) for r in rows]
    created = np.array([c for c, _, _ in times], np.int64)
    durations = np.array([max(1, d - (s if s is not None else c)) for c, d, s in times], np.int64)
    w0 = int(np.quantile(created, WINDOW_QUANTILE, method="lower"))
    span = max(1, int(created.max()) - w0)
    window = int(hours * 3600)
    compression = span / window
    submit = ((np.maximum(created, w0) - w0) / compression).astype(np.int64)
    reqs = [to_request(p) for p in pods]
    gpu = np.array([r.total_gpu_milli for r in reqs], np.float64) / 1000
    asked = float((gpu * np.minimum(durations, window - submit)).sum())
    target = load * capacity_gpus * window
    picks: list[tuple[int, int]] = []
    while asked < target:
        batch = rng.integers(len(reqs), size=(4096, 2))
        held = gpu[batch[:, 0]] * np.minimum(durations[batch[:, 0]], window - submit[batch[:, 1]])
        total = asked + np.cumsum(held)
        n = int(np.searchsorted(total, target)) + 1
        picks.extend((int(a), int(b)) for a, b in batch[:n])
        asked = float(total[min(n, len(total)) - 1])
    team_of = rng.integers(teams, size=len(reqs) + len(picks)) if teams else None

    def team(i: int) -> str:
        return f"team-{int(team_of[i])}" if team_of is not None else ""

    out = [
        TimedRequest(r, submit=int(submit[i]), duration=int(durations[i]), team=team(i))
        for i, r in enumerate(reqs)
    ]
    for k, (a, b) in enumerate(picks):
        clone = replace(reqs[a], request_id=f"{reqs[a].request_id}-clone-{k}")
        out.append(
            TimedRequest(
                clone, submit=int(submit[b]), duration=int(durations[a]), team=team(len(reqs) + k)
            )
        )
    return Workload(trace, tuple(out), compression, borrowed)


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """Replay one (trace, policy); returns the summary, the forecast coverage and the CPU seconds."""
    trace_dir = Path(job["trace_dir"])
    nodes = load_nodes(trace_dir)[: job.get("node_limit")]
    tool = load_tool(trace_dir.parent.parent / "tools" / "openb_workload.py")
    gpus = sum(len(n.gpus) for n in nodes)
    wl = load_workload(
        trace_dir,
        job["trace"],
        job["seed"],
        job["load"],
        job["teams"],
        gpus,
        job["hours"],
        job.get("pod_limit"),
    )
    csv_path = trace_dir / f"openb_pod_list_{job['trace']}.csv"
    _, prefix = tool.build(str(csv_path), job["seed"], [n.name for n in nodes])
    typical = typical_pods(to_request(p) for p in tool.load_pods(str(csv_path)))
    quotas = tuple(TeamQuota(f"team-{k}", gpus * 1000 // job["teams"]) for k in range(job["teams"]))
    options = ReplayOptions(
        policy=job["policy"],
        seed=job["seed"],
        quotas=quotas,
        typical=typical,
        node_priority=tuple(prefix[n.name] for n in nodes),
    )
    state = ClusterState.from_nodes(nodes)
    last = max(t.submit for t in wl.requests)
    options = replace(options, horizon=last + int(last * DRAIN))
    probe_times = [last * (k + 1) // (job["probes"] + 1) for k in range(job["probes"])]
    probes = Prober(wl.requests, probe_times, options)
    c0 = time.process_time()
    probing = job["probes"] and job["policy"] == job["probe_policy"]
    result = replay(state, wl.requests, options, observer=probes if probing else None)
    seconds = time.process_time() - c0 - probes.seconds
    summary = summarize(result, wl.requests, window=(0, last))
    return {
        "trace": job["trace"],
        "policy": job["policy"],
        "compression": wl.compression,
        "borrowed_times": wl.borrowed_times,
        "summary": asdict(summary),
        "forecast": probes.coverage(result),
        "seconds": seconds,
        "attempts": result.attempts,
        "window_seconds": last,
    }


class Prober:
    """At each probe time, estimate the start of every waiting request (from the durations of what has
    ended so far, per shape) and, after the replay, compare with when they really started in it."""

    def __init__(
        self, requests: Sequence[TimedRequest], probe_times: Sequence[int], options: ReplayOptions
    ) -> None:
        self.requests = requests
        self.pending = list(probe_times)
        self.options = options
        self.history: dict[str, list[int]] = {}
        self.estimates: list[tuple[int, int | None, int | None]] = []  # (index, earliest, latest)
        self.seconds = 0.0

    def __call__(self, view: CycleView) -> None:
        for i in view.ended:
            t = self.requests[i]
            self.history.setdefault(shape_label(t.request), []).append(max(1, t.duration))
        if not self.pending or view.time < self.pending[0]:
            return
        waiting = view.waiting()
        if not waiting:
            return
        self.pending.pop(0)
        c0 = time.process_time()
        running = [
            RunningWork(
                Running(view.assignments[i], end, self.requests[i].team),
                start,
                shape_label(self.requests[i].request),
            )
            for i, (start, end) in view.running.items()
        ]
        queue = [(self.requests[i], shape_label(self.requests[i].request)) for i in waiting]
        model = DurationModel({k: tuple(v) for k, v in self.history.items()})
        est = estimate_starts(view.state, running, queue, model, view.time, self.options)
        for i in waiting:
            e = est[self.requests[i].request_id]
            self.estimates.append((i, e.earliest, e.latest))
        self.seconds += time.process_time() - c0

    def coverage(self, result: Any) -> dict[str, Any]:
        inside = started = unbounded = 0
        widths = []
        for i, lo, hi in self.estimates:
            start = result.outcomes[i].start
            if start is None:
                continue
            started += 1
            if lo is not None and lo <= start and (hi is None or start <= hi):
                inside += 1
            if lo is not None and hi is not None:
                widths.append(hi - lo)
            else:
                unbounded += 1
        return {
            "estimates": len(self.estimates),
            "started": started,
            "inside": inside,
            "unbounded": unbounded,
            "coverage_pct": round(100 * inside / started, 1) if started else math.nan,
            "median_width_s": float(np.median(widths)) if widths else math.nan,
            "seconds": self.seconds,
        }


def _fmt_waits(w: dict[str, Any]) -> str:
    return f"{w['p50']:7.0f} {w['p95']:7.0f} {w['p99']:7.0f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        "trace        policy    alloc%  queue(mean/max)  wait p50/p95/p99 s      never  "
        "ETA cover  width s   cpu s"
    )
    for r in rows:
        s = r["summary"]
        f = r["forecast"]
        print(
            f"{r['trace']:<12} {r['policy']:<8} {s['allocation_pct']:6.2f}  "
            f"{s['queue_mean']:7.1f}/{s['queue_max']:<6d}  {_fmt_waits(s['waits'])}  "
            f"{s['never_started']:6d}  {f['coverage_pct']:6.1f} %  {f['median_width_s']:7.0f}  "
            f"{r['seconds']:6.1f}"
        )
    print("\nwait p95 (s) by request shape")
    shapes = sorted({k for r in rows for k in r["summary"]["waits_by_shape"]})
    print(f"{'trace':<12} {'policy':<8} " + " ".join(f"{k:>8}" for k in shapes))
    for r in rows:
        by = r["summary"]["waits_by_shape"]
        cells = [
            f"{by[k]['p95']:8.0f}" if k in by and by[k]["count"] else f"{'-':>8}" for k in shapes
        ]
        print(f"{r['trace']:<12} {r['policy']:<8} " + " ".join(cells))
    if any(r["summary"]["teams"] for r in rows):
        print("\nteam shares (time-weighted GPUs, % of allocated, % of quota)")
        for r in rows:
            cells = [
                f"{t['team']} {t['gpus']:.0f} GPUs {t['share_pct']:.1f}% ({t['quota_pct']:.0f}% of quota)"
                for t in r["summary"]["teams"]
            ]
            print(f"{r['trace']:<12} {r['policy']:<8} " + "; ".join(cells))


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, run every (trace, policy), print the table."""
    ap = argparse.ArgumentParser(prog="python -m bench.dynamic", description=__doc__.split("\n")[0])
    ap.add_argument("--trace-dir", default="../shared/traces/openb")
    ap.add_argument("--traces", default=",".join(DEFAULT_TRACES))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--teams", type=int, default=0)
    ap.add_argument("--probes", type=int, default=4)
    ap.add_argument("--probe-policy", default="tessera")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--nodes", type=int, default=None, help="first N nodes only (smoke, development)"
    )
    ap.add_argument(
        "--pods", type=int, default=None, help="every k-th pod, at most N (smoke, development)"
    )
    args = ap.parse_args(argv)
    jobs = [
        {
            "trace_dir": args.trace_dir,
            "trace": trace,
            "policy": policy,
            "seed": args.seed,
            "load": args.load,
            "teams": args.teams,
            "probes": args.probes,
            "hours": args.hours,
            "probe_policy": args.probe_policy,
            "node_limit": args.nodes,
            "pod_limit": args.pods,
        }
        for trace in args.traces.split(",")
        for policy in args.policies.split(",")
    ]
    t0 = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(run_one, jobs))
    else:
        rows = [run_one(j) for j in jobs]
    wall = time.perf_counter() - t0
    print(
        f"dynamic replay: {len(rows)} runs, seed {args.seed}, offered load {args.load:.2f} x capacity, "
        f"{wall:.0f} s on {args.jobs} processes"
    )
    for trace in dict.fromkeys(r["trace"] for r in rows):
        r = next(x for x in rows if x["trace"] == trace)
        print(
            f"  {trace}: arrivals compressed {r['compression']:.0f}x, window "
            f"{r['window_seconds'] / 3600:.1f} h, {r['summary']['requests']} requests"
            + (f", {r['borrowed_times']} with borrowed times" if r["borrowed_times"] else "")
        )
    print()
    print_table(rows)
    total = sum(r["forecast"]["started"] for r in rows)
    inside = sum(r["forecast"]["inside"] for r in rows)
    unbounded = sum(r["forecast"]["unbounded"] for r in rows)
    if total:
        print(
            f"\nETA coverage: {inside}/{total} = {100 * inside / total:.1f} % of real starts inside the "
            f"estimated range (target >= 80 %); {unbounded} estimates had no upper bound"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
