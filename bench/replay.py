"""Replay the openb trace under the FGD paper's protocol and compare with the published figures.

    python -m bench.replay [--traces default,gpuspec33] [--policies tessera,fgd,bestfit] [--seeds 42-51]
                           [--jobs 2] [--json PATH] [--curves-csv PATH] [--plot-html PATH]
                           [--decision-log PATH] [--no-speed]

The pod sequence and node tie-break order of every (trace, seed) come from the shared
``openb_workload.py`` (used in place, see ``--workload-tool``), so our runs see exactly the paper's work
(protocol §3, §9). Arrive-only replay, one attempt per pod, allocation bucketed by arrived % (§5.2).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from core.placement import (
    POLICIES,
    ClusterState,
    GpuSpec,
    NodeSpec,
    PlacementRequest,
    place_one,
    typical_pods,
)

DEFAULT_TRACES = (
    "cpu050",
    "cpu250",
    "default",
    "gpushare100",
    "gpushare40",
    "gpuspec33",
    "multigpu50",
)
POLICY_LABEL = {
    "random": "Random",
    "dotproduct": "DotProd",
    "gpuclustering": "GpuClustering",
    "gpupacking": "GpuPacking",
    "bestfit": "BestFit",
    "fgd": "FGD",
}
#: FirstFit at arrived 100 / 130 for seeds 42, 43, 44 (protocol §12), for the reference column.
FIRSTFIT_REF = {
    "default": (94.31, 94.13, 94.59),
    "gpushare100": (86.02, 85.89, 86.06),
    "multigpu50": (96.29, 96.29, 96.45),
    "gpuspec33": (93.77, 93.59, 93.87),
}
NODE_CSV = "openb_node_list_gpu_node.csv"
#: Engine memory budget of the full fill: 64 MB at 5,000 x 8, 256 MB at 20,000 x 8 (issue 18).
FILL_MB_PER_NODE = 64 / 5000
TOTAL_GPUS = 6212


# ---------------------------------------------------------------- inputs
def trace_name(name: str) -> str:
    """``openb_pod_list_default`` / ``default.csv`` -> ``default``."""
    name = Path(name).name.removesuffix(".csv")
    return name.removeprefix("openb_pod_list_")


def load_tool(path: Path) -> ModuleType:
    """Import the shared ``openb_workload.py`` in place."""
    spec = importlib.util.spec_from_file_location("openb_workload", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the workload tool {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_nodes(trace_dir: Path) -> list[NodeSpec]:
    """The 1,213 GPU nodes of the protocol (§4.1); the trace has no GPU memory, so it is 0."""
    nodes = []
    with open(trace_dir / NODE_CSV) as fh:
        for row in csv.DictReader(fh):
            model = row["model"]
            gpus = tuple(GpuSpec(j, model, 0) for j in range(int(row["gpu"])))
            nodes.append(
                NodeSpec(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), gpus, model)
            )
    return nodes


def to_request(pod: dict[str, Any]) -> PlacementRequest:
    """A pod dict of ``openb_workload.py`` as a :class:`PlacementRequest`."""
    g, m = int(pod["num_gpu"]), int(pod["gpu_milli"])
    spec = pod["gpu_spec"]
    return PlacementRequest(
        request_id=pod["name"],
        cpu_milli=int(pod["cpu"]),
        memory_mib=int(pod["mem"]),
        gpu_count=g if m > 0 else 0,
        gpu_milli=m if g > 0 else 0,
        gpu_models=tuple(spec.split("|")) if spec else (),
    )


def parse_seeds(text: str) -> list[int]:
    """``42-51`` / ``42,45,50`` / ``42-44,50`` -> list of ints."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-")
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


# ---------------------------------------------------------------- one run
def alloc_columns(
    arrived: np.ndarray, used: np.ndarray, total_gpus: int = TOTAL_GPUS
) -> list[float]:
    """Columns 0..130 of ``analysis_allo_discrete.csv`` (§5.2) from per-event milli totals
    (`total_gpus`: the cluster's, less than the protocol's with ``--nodes``)."""
    arr = np.round(arrived / total_gpus / 10, 0)
    alloc = np.round(used / total_gpus / 10, 2)
    cols = []
    for k in range(131):
        v = alloc[arr == k]
        if v.size == 0:
            v = alloc[(arr >= k - 1) & (arr <= k + 1)]
        cols.append(round(float(np.mean(v)), 2) if v.size else math.nan)
    return cols


def every_kth(items: Sequence[Any], limit: int | None) -> list[Any]:
    """Every k-th item, at most `limit` (all when `limit` is None): a smaller run with the same mix."""
    if not limit:
        return list(items)
    step = -(-len(items) // limit)
    return list(items[::step])


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """Replay one (trace, policy, seed); returns the allocation columns and timing."""
    trace_dir = Path(job["trace_dir"])
    tool = load_tool(Path(job["tool"]))
    nodes = load_nodes(trace_dir)[: job.get("node_limit")]
    csv_path = trace_dir / f"openb_pod_list_{job['trace']}.csv"
    pods, prefix = tool.build(str(csv_path), job["seed"], [n.name for n in nodes])
    pods = every_kth(pods, job.get("pod_limit"))
    state = ClusterState.from_nodes(nodes)
    prio = np.array([prefix[n.name] for n in nodes], np.int64)
    typical = typical_pods(to_request(p) for p in tool.load_pods(str(csv_path)))
    policy = POLICIES[job["policy"]](typical=typical, seed=job["seed"])
    requests = [to_request(p) for p in pods]
    arrived = np.zeros(len(requests), np.int64)
    used = np.zeros(len(requests), np.int64)
    log: list[tuple[Any, ...]] = []
    total = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    for idx, r in enumerate(requests):
        total += r.total_gpu_milli
        a = place_one(state, r, policy, prio)
        arrived[idx] = total
        used[idx] = state.allocated_gpu_milli
        if job["log"]:
            if a is None:
                log.append((job["seed"], idx, r.request_id, "", "", 0))
            else:
                gpus = ";".join(str(j) for j in a.gpu_indices)
                log.append(
                    (job["seed"], idx, r.request_id, a.node, gpus, a.gpu_milli if gpus else 0)
                )
    wall_seconds = time.perf_counter() - t0
    seconds = time.process_time() - c0  # CPU time: robust to other load on the machine
    cols = alloc_columns(arrived, used, sum(len(n.gpus) for n in nodes))
    return {
        "trace": job["trace"],
        "policy": job["policy"],
        "seed": job["seed"],
        "pods": len(requests),
        "allocated_gpu_milli": int(state.allocated_gpu_milli),
        "alloc100": cols[100],
        "alloc130": cols[130],
        "columns": cols,
        "seconds": seconds,
        "wall_seconds": wall_seconds,
        "decisions_per_s": len(requests) / seconds if seconds else math.inf,
        "decisions_per_wall_s": len(requests) / wall_seconds if wall_seconds else math.inf,
        "log": log,
    }


# ---------------------------------------------------------------- published figures
def load_published(trace_dir: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(trace, policy label) -> published means/min/max at 100 and 130 (``fgd-expected.csv``)."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    path = trace_dir / "fgd-expected.csv"
    if not path.exists():
        return out
    with open(path) as fh:
        for row in csv.DictReader(fh):
            vals = {k: float(v) for k, v in row.items() if k.startswith("alloc")}
            out[(trace_name(row["workload"]), row["policy"])] = vals
    return out


def load_published_per_seed(trace_dir: Path) -> dict[tuple[str, str, int], tuple[float, float]]:
    """(trace, policy label, seed) -> (alloc100, alloc130) from ``fgd-published-per-seed.csv``."""
    out: dict[tuple[str, str, int], tuple[float, float]] = {}
    path = trace_dir / "fgd-published-per-seed.csv"
    if not path.exists():
        return out
    with open(path) as fh:
        for row in csv.DictReader(fh):
            key = (trace_name(row["workload"]), row["policy"], int(row["seed"]))
            out[key] = (float(row["alloc100"]), float(row["alloc130"]))
    return out


# ---------------------------------------------------------------- speed and memory
def synthetic_cluster(n_nodes: int, gpus: int) -> list[NodeSpec]:
    """``n_nodes`` identical nodes of ``gpus`` GPUs (96 vCPU, 384 GiB, two models alternating)."""
    out = []
    for i in range(n_nodes):
        model = "G2" if i % 4 else "T4"
        gs = tuple(GpuSpec(j, model, 16384, numa_node=j // (gpus // 2 or 1)) for j in range(gpus))
        out.append(NodeSpec(f"syn-{i:05d}", 96000, 393216, gs, model))
    return out


def speed_run(
    nodes: list[NodeSpec], pods: Sequence[PlacementRequest], policy: str, typical: Any, limit: int
) -> tuple[float, int]:
    """Decisions per CPU-second of ``policy`` over the first ``limit`` pods (node order = priority)."""
    state = ClusterState.from_nodes(nodes)
    pol = POLICIES[policy](typical=typical, seed=0)
    prio = np.arange(len(nodes), dtype=np.int64)
    t0 = time.process_time()
    n = 0
    for r in pods[:limit]:
        place_one(state, r, pol, prio)
        n += 1
    return n / (time.process_time() - t0), n


def engine_bytes(state: ClusterState, policy: Any) -> int:
    """Engine state + policy caches in bytes: the state's arrays and, when the policy keeps caches, their
    accounted size (score vectors, memos; see ``cache_nbytes``)."""
    caches = policy.cache_nbytes() if hasattr(policy, "cache_nbytes") else 0
    return state.nbytes() + int(caches)


def fill_run(
    nodes: list[NodeSpec],
    orig: Sequence[PlacementRequest],
    policy: str,
    typical: Any,
    windows: int = 10,
    seed: int = 0,
) -> list[dict[str, float]]:
    """A full fill: pods drawn uniformly from ``orig`` arrive until their GPU demand reaches the cluster's
    GPU capacity; per window of 10 % of that arrived demand, the decisions, the decisions per CPU-second and
    the engine memory (state + caches) at the window's end."""
    state = ClusterState.from_nodes(nodes)
    pol = POLICIES[policy](typical=typical, seed=0)
    prio = np.arange(len(nodes), dtype=np.int64)
    capacity = int(state.gpu_ok.sum()) * 1000
    rng = np.random.default_rng(seed)
    out: list[dict[str, float]] = []
    arrived = count = placed = 0
    window = 0
    seconds = 0.0
    while window < windows:
        r = orig[int(rng.integers(0, len(orig)))]
        arrived += r.total_gpu_milli
        c0 = time.process_time()
        a = place_one(state, r, pol, prio)
        seconds += time.process_time() - c0
        count += 1
        placed += a is not None
        if arrived * windows >= (window + 1) * capacity:
            out.append(
                {
                    "window": window,
                    "decisions": count,
                    "placed": placed,
                    "decisions_per_s": count / seconds if seconds else math.inf,
                    "engine_mb": engine_bytes(state, pol) / 1e6,
                    "allocated_pct": 100.0 * state.allocated_gpu_milli / capacity,
                }
            )
            window += 1
            count = placed = 0
            seconds = 0.0
    return out


def fill_section(
    orig: Sequence[PlacementRequest], typical: Any, sizes: Sequence[int], policies: Sequence[str]
) -> dict[str, Any]:
    """:func:`fill_run` of each policy (and FirstFit, the baseline of the same run) at each size × 8."""
    out: dict[str, Any] = {}
    for n in sizes:
        nodes = synthetic_cluster(n, 8)
        out[f"{n}x8"] = {
            p: fill_run(nodes, orig, p, typical) for p in dict.fromkeys([*policies, "firstfit"])
        }
    return out


def print_fill(fill: dict[str, Any], budgets: dict[str, float]) -> None:
    """Per size and policy, one line per window: decisions/s (and × FirstFit's same window), memory."""
    print(
        "\nfull fill (synthetic, pods of the default trace until their GPU demand = capacity; per 10 % of"
        " arrived demand: decisions, decisions per CPU-second and x FirstFit's same window, engine"
        " state + caches at the window's end):"
    )
    for size, runs in fill.items():
        base = runs["firstfit"]
        for p, windows in runs.items():
            if p == "firstfit":
                continue
            print(f"  {size:9s} {p}: budget {budgets.get(size, math.nan):.0f} MB")
            for w, b in zip(windows, base, strict=True):
                print(
                    f"    {10 * w['window']:3.0f}-{10 * w['window'] + 10:3.0f} %  {w['decisions']:7.0f} dec"
                    f"  {w['decisions_per_s']:7.0f}/s ({w['decisions_per_s'] / b['decisions_per_s']:.2f}x"
                    f" firstfit {b['decisions_per_s']:.0f}/s)  {w['engine_mb']:7.1f} MB"
                    f"  allocated {w['allocated_pct']:5.1f} %"
                )
            slowest = min(w["decisions_per_s"] for w in windows)
            peak = max(w["engine_mb"] for w in windows)
            total = sum(w["decisions"] for w in windows)
            print(
                f"    slowest window {slowest:.0f}/s, peak memory {peak:.1f} MB "
                f"({peak / budgets.get(size, math.nan):.2f}x budget), {total} decisions"
            )


def speed_section(trace_dir: Path, tool: ModuleType, policies: Sequence[str]) -> dict[str, Any]:
    """Decisions/s on a synthetic 5,000-node × 8-GPU cluster (one core) and its state memory."""
    csv_path = trace_dir / "openb_pod_list_default.csv"
    orig = [to_request(p) for p in tool.load_pods(str(csv_path))]
    typical = typical_pods(orig)
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(orig), 4000)
    pods = [orig[int(i)] for i in picks]
    nodes = synthetic_cluster(5000, 8)
    state = ClusterState.from_nodes(nodes)
    out: dict[str, Any] = {"state_bytes_5000x8": state.nbytes(), "synthetic": {}}
    ff = run_one(
        {
            "trace_dir": str(trace_dir),
            "tool": str(tool.__file__),
            "trace": "default",
            "policy": "firstfit",
            "seed": 42,
            "log": False,
        }
    )
    out["openb_firstfit_default42"] = ff["decisions_per_s"]
    for pol in dict.fromkeys([*policies, "firstfit"]):
        rate, n = speed_run(nodes, pods, pol, typical, 4000)
        out["synthetic"][pol] = {"decisions_per_s": rate, "decisions": n}
    return out


# ---------------------------------------------------------------- output
def summarise(results: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (trace, policy): mean/min/max at 100 and 130 over seeds, decisions/s."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["trace"], r["policy"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        a100 = np.array([r["alloc100"] for r in rs])
        a130 = np.array([r["alloc130"] for r in rs])
        pods = sum(r["pods"] for r in rs)
        secs = sum(r["seconds"] for r in rs)
        out[key] = {
            "seeds": sorted(r["seed"] for r in rs),
            "alloc100_mean": float(a100.mean()),
            "alloc100_min": float(a100.min()),
            "alloc100_max": float(a100.max()),
            "alloc130_mean": float(a130.mean()),
            "alloc130_min": float(a130.min()),
            "alloc130_max": float(a130.max()),
            "decisions_per_s": pods / secs if secs else math.inf,
        }
    return out


def _num(x: float, signed: bool = False) -> str:
    """A 6-wide figure, or '-' when there is no published value."""
    if math.isnan(x):
        return f"{'-':>6s}"
    return f"{x:+6.2f}" if signed else f"{x:6.2f}"


def print_table(
    summary: dict[tuple[str, str], dict[str, Any]],
    published: dict[tuple[str, str], dict[str, float]],
    traces: Sequence[str],
    policies: Sequence[str],
) -> list[str]:
    """Print the per trace × policy table; returns the lines."""
    lines = [
        f"{'trace':12s} {'policy':9s} {'alloc@100 mean [min-max]':26s} {'pub':>6s} {'diff':>6s} "
        f"{'vsFGD':>6s} {'alloc@130 mean [min-max]':26s} {'pub':>6s} {'diff':>6s} {'dec/s':>7s}",
        "(pub = published mean of the same policy, vsFGD = ours minus the published FGD mean @100,"
        " dec/s = placement decisions per CPU-second of the replay loop)",
    ]
    for t in traces:
        fgd_pub = published.get((t, "FGD"), {})
        for p in policies:
            s = summary.get((t, p))
            if s is None:
                continue
            pub = published.get((t, POLICY_LABEL.get(p, "")), {})
            p100, p130 = pub.get("alloc100_mean", math.nan), pub.get("alloc130_mean", math.nan)
            f100 = fgd_pub.get("alloc100_mean", math.nan)
            lines.append(
                f"{t:12s} {p:9s} "
                f"{s['alloc100_mean']:6.2f} [{s['alloc100_min']:6.2f}-{s['alloc100_max']:6.2f}]    "
                f"{_num(p100)} {_num(s['alloc100_mean'] - p100, True)} "
                f"{_num(s['alloc100_mean'] - f100, True)} "
                f"{s['alloc130_mean']:6.2f} [{s['alloc130_min']:6.2f}-{s['alloc130_max']:6.2f}]    "
                f"{_num(p130)} {_num(s['alloc130_mean'] - p130, True)} {s['decisions_per_s']:7.0f}"
            )
    for p in policies:
        diffs = [
            summary[(t, p)]["alloc100_mean"] - published[(t, "FGD")]["alloc100_mean"]
            for t in traces
            if (t, p) in summary and (t, "FGD") in published
        ]
        if diffs:
            lines.append(
                f"{p:9s} vs published FGD @100: mean {np.mean(diffs):+.2f}, "
                f"worst {min(diffs):+.2f}, traces ahead {sum(d > 0 for d in diffs)}/{len(diffs)}"
            )
    for line in lines:
        print(line)
    return lines


def write_curves(path: Path, results: list[dict[str, Any]]) -> None:
    """One row per run: trace, policy, seed, columns 0..130."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["trace", "policy", "seed", *range(131)])
        for r in sorted(results, key=lambda r: (r["trace"], r["policy"], r["seed"])):
            w.writerow([r["trace"], r["policy"], r["seed"], *r["columns"]])


def write_plot(path: Path, results: list[dict[str, Any]]) -> None:
    """Mean allocation curves (arrived 75..130 %) per trace and policy, as a plotly HTML page."""
    import plotly.graph_objects as go  # only here: the engine and the replay core stay plotly-free
    from plotly.subplots import make_subplots

    traces = sorted({r["trace"] for r in results})
    fig = make_subplots(rows=len(traces), cols=1, subplot_titles=traces, shared_xaxes=True)
    xs = list(range(75, 131))
    for row, t in enumerate(traces, start=1):
        for p in sorted({r["policy"] for r in results if r["trace"] == t}):
            cols = np.array([r["columns"] for r in results if r["trace"] == t and r["policy"] == p])
            fig.add_trace(
                go.Scatter(x=xs, y=cols.mean(axis=0)[75:], name=f"{t}/{p}", mode="lines"),
                row=row,
                col=1,
            )
    fig.update_layout(height=300 * len(traces), title="GPU allocation (%) vs arrived (%)")
    fig.write_html(str(path))


def write_decision_log(path: Path, results: list[dict[str, Any]]) -> list[Path]:
    """§11 decision log(s): one CSV per (trace, policy) when several were run."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["trace"], r["policy"]), []).append(r)
    written = []
    for (t, p), rs in sorted(groups.items()):
        out = path if len(groups) == 1 else path.with_name(f"{path.stem}-{t}-{p}{path.suffix}")
        with open(out, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["seed", "index", "pod", "node", "gpus", "gpu_milli"])
            for r in sorted(rs, key=lambda r: r["seed"]):
                w.writerows(r["log"])
        written.append(out)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__.split("\n")[0])
    ap.add_argument("--trace-dir", default="../shared/traces/openb")
    ap.add_argument(
        "--workload-tool", default=None, help="default: TRACE_DIR/../../tools/openb_workload.py"
    )
    ap.add_argument("--traces", default=",".join(DEFAULT_TRACES))
    ap.add_argument("--policies", default="tessera,fgd,bestfit")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--curves-csv", type=Path)
    ap.add_argument("--plot-html", type=Path)
    ap.add_argument("--decision-log", type=Path)
    ap.add_argument(
        "--no-speed", action="store_true", help="skip the synthetic 5,000-node speed section"
    )
    ap.add_argument(
        "--fill-sizes",
        default="5000,20000",
        help="node counts (x 8 GPUs) of the full-fill speed/memory section; empty to skip",
    )
    ap.add_argument("--fill-policies", default="tessera", help="policies of the full-fill section")
    ap.add_argument(
        "--speed-only", action="store_true", help="only the speed sections (no openb replay)"
    )
    ap.add_argument(
        "--nodes", type=int, default=None, help="first N nodes only (smoke, development)"
    )
    ap.add_argument(
        "--pods", type=int, default=None, help="every k-th pod, at most N (smoke, development)"
    )
    args = ap.parse_args(argv)

    trace_dir = Path(args.trace_dir).resolve()
    tool_path = Path(args.workload_tool or trace_dir / ".." / ".." / "tools" / "openb_workload.py")
    if not (trace_dir / NODE_CSV).exists() or not tool_path.exists():
        print(f"trace dir {trace_dir} or workload tool {tool_path} not found", file=sys.stderr)
        return 2
    traces = [trace_name(t) for t in args.traces.split(",") if t.strip()]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES:
            print(f"unknown policy {p!r}; known: {', '.join(POLICIES)}", file=sys.stderr)
            return 2
    seeds = parse_seeds(args.seeds)
    jobs = [
        {
            "trace_dir": str(trace_dir),
            "tool": str(tool_path),
            "trace": t,
            "policy": p,
            "seed": s,
            "log": args.decision_log is not None,
            "node_limit": args.nodes,
            "pod_limit": args.pods,
        }
        for t in traces
        for p in policies
        for s in seeds
    ]
    if args.speed_only:
        jobs = []
    t0 = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as ex:
            results = list(ex.map(run_one, jobs))
    else:
        results = [run_one(j) for j in jobs]
    wall = time.perf_counter() - t0
    summary = summarise(results)
    published = load_published(trace_dir)
    print(
        f"openb replay: {len(jobs)} runs ({len(traces)} traces x {len(policies)} policies x "
        f"{len(seeds)} seeds) in {wall:.0f} s on {args.jobs} processes\n"
    )
    lines = print_table(summary, published, traces, policies)

    per_seed = load_published_per_seed(trace_dir)
    exact = [
        (r["trace"], r["policy"], r["seed"])
        for r in results
        if per_seed.get((r["trace"], POLICY_LABEL.get(r["policy"], ""), r["seed"]))
        == (r["alloc100"], r["alloc130"])
    ]
    comparable = [
        r for r in results if (r["trace"], POLICY_LABEL.get(r["policy"], ""), r["seed"]) in per_seed
    ]
    if comparable:
        print(
            f"\nruns identical to the published per-seed row (@100 and @130): "
            f"{len(exact)}/{len(comparable)}"
        )
    ff_rows = []
    for t, ref in FIRSTFIT_REF.items():
        for p in policies:
            mine = [
                r["alloc100"]
                for r in results
                if r["trace"] == t and r["policy"] == p and r["seed"] in (42, 43, 44)
            ]
            if len(mine) == 3:
                ff_rows.append(
                    f"  {t:12s} {p:9s} seeds 42-44 @100: {np.mean(mine):6.2f}"
                    f"  FirstFit (§12): {np.mean(ref):6.2f}  diff {np.mean(mine) - np.mean(ref):+.2f}"
                )
    if ff_rows:
        print("\nagainst FirstFit (protocol §12, same seeds):")
        print("\n".join(ff_rows))

    speed: dict[str, Any] = {}
    if not args.no_speed:
        rates = {p: summary_rate(results, p) for p in dict.fromkeys(policies)}
        speed = speed_section(trace_dir, load_tool(tool_path), policies)
        speed["openb"] = rates
        print(
            "\nspeed (decisions per CPU-second, one process = one core; ratios against FirstFit"
            " measured in this run):"
        )
        base_o = speed["openb_firstfit_default42"]
        print(f"  openb 1,213 nodes      firstfit  {base_o:8.0f}/s (default, seed 42)")
        for p, v in rates.items():
            print(f"  openb 1,213 nodes      {p:9s} {v:8.0f}/s ({v / base_o:.2f}x firstfit)")
        syn = speed["synthetic"]
        ff = syn["firstfit"]["decisions_per_s"]
        for p, v in syn.items():
            print(
                f"  synthetic 5,000 x 8    {p:9s} {v['decisions_per_s']:8.0f}/s "
                f"({v['decisions_per_s'] / ff:.2f}x firstfit)"
            )
        load = os.getloadavg()
        speed["load_average"] = load
        print(
            f"  (machine load average during the run: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f})"
        )
        mb = speed["state_bytes_5000x8"] / 1e6
        print(f"  state memory 5,000 nodes x 8 GPUs: {mb:.2f} MB ({mb / 10:.2f}x the 10 MB budget)")
        sizes = [int(x) for x in args.fill_sizes.split(",") if x.strip()]
        if sizes:
            csv_path = trace_dir / "openb_pod_list_default.csv"
            orig = [to_request(p) for p in load_tool(tool_path).load_pods(str(csv_path))]
            fill_policies = [p.strip() for p in args.fill_policies.split(",") if p.strip()]
            speed["fill"] = fill_section(orig, typical_pods(orig), sizes, fill_policies)
            print_fill(speed["fill"], {f"{n}x8": FILL_MB_PER_NODE * n for n in sizes})
    if args.json:
        payload = {
            "summary": [{"trace": k[0], "policy": k[1], **v} for k, v in summary.items()],
            "runs": [{k: v for k, v in r.items() if k != "log"} for r in results],
            "published": [{"trace": k[0], "policy": k[1], **v} for k, v in published.items()],
            "speed": speed,
            "wall_seconds": wall,
            "table": lines,
        }
        args.json.write_text(json.dumps(payload, indent=1))
    if args.curves_csv:
        write_curves(args.curves_csv, results)
    if args.plot_html:
        write_plot(args.plot_html, results)
    if args.decision_log:
        for path in write_decision_log(args.decision_log, results):
            print(f"decision log: {path}")
    return 0


def summary_rate(results: list[dict[str, Any]], policy: str) -> float:
    """Decisions per CPU-second of one policy over all its runs (replay loop only)."""
    rs = [r for r in results if r["policy"] == policy]
    secs = sum(r["seconds"] for r in rs)
    return sum(r["pods"] for r in rs) / secs if secs else math.nan


if __name__ == "__main__":
    sys.exit(main())
