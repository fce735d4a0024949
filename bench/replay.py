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
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from scheduling.engine import (
    POLICIES,
    ClusterState,
    GpuSpec,
    NodeSpec,
    PlacementRequest,
    place_one,
    typical_pods,
)

DEFAULT_TRACES = ("cpu050", "cpu250", "default", "gpushare100", "gpushare40", "gpuspec33", "multigpu50")
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
def alloc_columns(arrived: np.ndarray, used: np.ndarray) -> list[float]:
    """Columns 0..130 of ``analysis_allo_discrete.csv`` (§5.2) from per-event milli totals."""
    arr = np.round(arrived / TOTAL_GPUS / 10, 0)
    alloc = np.round(used / TOTAL_GPUS / 10, 2)
    cols = []
    for k in range(131):
        v = alloc[arr == k]
        if v.size == 0:
            v = alloc[(arr >= k - 1) & (arr <= k + 1)]
        cols.append(round(float(np.mean(v)), 2) if v.size else math.nan)
    return cols


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """Replay one (trace, policy, seed); returns the allocation columns and timing."""
    trace_dir = Path(job["trace_dir"])
    tool = load_tool(Path(job["tool"]))
    nodes = load_nodes(trace_dir)
    csv_path = trace_dir / f"openb_pod_list_{job['trace']}.csv"
    pods, prefix = tool.build(str(csv_path), job["seed"], [n.name for n in nodes])
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
                log.append((job["seed"], idx, r.request_id, a.node, gpus, a.gpu_milli if gpus else 0))
    seconds = time.perf_counter() - t0
    cols = alloc_columns(arrived, used)
    return {
        "trace": job["trace"],
        "policy": job["policy"],
        "seed": job["seed"],
        "pods": len(requests),
        "placed": int(sum(1 for _ in ())) if False else None,
        "alloc100": cols[100],
        "alloc130": cols[130],
        "columns": cols,
        "seconds": seconds,
        "decisions_per_s": len(requests) / seconds if seconds else math.inf,
        "log": log,
    }
