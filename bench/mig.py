"""MIG packing against first-fit on the same sequence: the openb slice sizes mapped to the smallest covering profile.

    python -m bench.mig [--traces default,gpushare100] [--seeds 42-44] [--model H100-80GB]
                        [--churn-traces gpushare100] [--churn-capacity 0.8]

Every GPU of the openb cluster (1,213 nodes, 6,212 GPUs) becomes one empty, dynamic MIG card of ``--model``. The pod
sequence of each (trace, seed) comes from the shared ``openb_workload.py`` (as ``bench.replay`` loads it); each pod
asking for one GPU becomes one MIG request for the smallest profile whose compute covers its GPU share (a whole
GPU = ``7g``); CPU-only pods and pods asking for several GPUs are left out (MIG instances are one per card; the
counts are printed). Arrive-only replay, one attempt per request, as in ``bench.replay``.

Printed per trace, policy and seed: GPU-equivalents in use (compute slices / 7) as a share of the cluster when the
requests that arrived reach 100 % of it and at the end, whole-card (``7g``) requests left unplaced, cards on which a
``7g`` still fits at the end, and the ratio packing / first-fit measured in the same run.

Arrive-only replay hardly separates the two (first-fit is itself a good packer when nothing leaves), so a second
section replays the trace's own arrivals *and departures* (``creation_time`` / ``deletion_time``, the pods of the
CSV without the protocol's tuning) on a cluster sized to ``--churn-capacity`` of the peak concurrent demand:
departures leave holes, and where later requests land decides whether large profiles still fit. Printed: requests
and GPU-equivalents rejected, by profile, for both policies on the same event sequence.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.replay import NODE_CSV, every_kth, load_nodes, load_tool, parse_seeds
from core.placement.mig import MigCard, MigPlacement, MigPolicy, MigRequest, MigState
from core.placement.mig_profiles import MIG_GEOMETRIES, MigGeometry
from core.units import MIG_COMPUTE_SLICES

WHOLE_CARD_INDEX = 5


def mig_requests(
    pods: Sequence[dict[str, Any]], geometry: MigGeometry
) -> tuple[list[MigRequest], Counter[str]]:
    """The pods that ask for one GPU as MIG requests; the rest counted by why they were left out."""
    out: list[MigRequest] = []
    skipped: Counter[str] = Counter()
    for pod in pods:
        gpus, milli = int(pod["num_gpu"]), int(pod["gpu_milli"])
        if gpus == 0 or milli == 0:
            skipped["cpu_only"] += 1
        elif gpus > 1:
            skipped["multi_gpu"] += 1
        else:
            out.append(MigRequest(pod["name"], geometry.smallest_covering(milli).name))
    return out, skipped


def run(
    cards: list[MigCard], requests: list[MigRequest], policy: MigPolicy, geometry: MigGeometry
) -> dict[str, Any]:
    """Replay one sequence under one policy."""
    state = MigState(cards)
    capacity = len(cards) * MIG_COMPUTE_SLICES
    sizes = {p.name: p.compute_slices for p in geometry.profiles}
    arrived = 0
    at_full: float | None = None
    whole_unplaced = 0
    placed = 0
    c0 = time.process_time()
    for r in requests:
        arrived += sizes[r.profile]
        outcome = state.place(r, policy)
        if isinstance(outcome, MigPlacement):
            placed += 1
        elif sizes[r.profile] == MIG_COMPUTE_SLICES:
            whole_unplaced += 1
        if at_full is None and arrived >= capacity:
            at_full = state.used_compute_slices() / capacity
    seconds = time.process_time() - c0
    return {
        "at_full": at_full if at_full is not None else state.used_compute_slices() / capacity,
        "at_end": state.used_compute_slices() / capacity,
        "placed": placed,
        "whole_unplaced": whole_unplaced,
        "whole_placeable_cards": state.placeable_cards(WHOLE_CARD_INDEX),
        "decisions_per_s": len(requests) / seconds if seconds else float("inf"),
    }


def churn_events(
    csv_path: Path, geometry: MigGeometry, limit: int | None = None
) -> list[tuple[int, int, MigRequest]]:
    """(time, 0 = departure / 1 = arrival, request) of the one-GPU pods of the CSV (every k-th, at most
    `limit`, when given), departures first at a tie."""
    events: list[tuple[int, int, MigRequest]] = []
    with open(csv_path) as fh:
        for row in every_kth(list(csv.DictReader(fh)), limit):
            gpus, milli = int(row["num_gpu"]), int(float(row["gpu_milli"] or 0))
            if gpus != 1 or milli <= 0:
                continue
            request = MigRequest(row["name"], geometry.smallest_covering(min(milli, 1000)).name)
            events.append((int(row["creation_time"]), 1, request))
            events.append((int(row["deletion_time"]), 0, request))
    events.sort(key=lambda e: (e[0], e[1], e[2].request_id))
    return events


def peak_demand(events: list[tuple[int, int, MigRequest]], sizes: dict[str, int]) -> int:
    """The most compute slices asked for at once over the event sequence."""
    now = peak = 0
    for _t, kind, r in events:
        now += sizes[r.profile] if kind else -sizes[r.profile]
        peak = max(peak, now)
    return peak


def run_churn(
    cards: list[MigCard],
    events: list[tuple[int, int, MigRequest]],
    policy: MigPolicy,
    sizes: dict[str, int],
) -> dict[str, Any]:
    """Replay arrivals and departures; a rejected request is not retried (its departure is ignored)."""
    state = MigState(cards)
    rejected: Counter[str] = Counter()
    rejected_slices = asked_slices = 0
    for _t, kind, r in events:
        if kind == 0:
            state.release(r.request_id)
            continue
        asked_slices += sizes[r.profile]
        if not isinstance(state.place(r, policy), MigPlacement):
            rejected[r.profile] += 1
            rejected_slices += sizes[r.profile]
    return {
        "rejected": rejected,
        "rejected_share": rejected_slices / asked_slices if asked_slices else 0.0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.mig", description=(__doc__ or "").split("\n")[0]
    )
    ap.add_argument("--trace-dir", default="../shared/traces/openb")
    ap.add_argument(
        "--workload-tool", default=None, help="default: TRACE_DIR/../../tools/openb_workload.py"
    )
    ap.add_argument("--traces", default="default,gpushare100")
    ap.add_argument("--seeds", default="42-44")
    ap.add_argument("--model", default="H100-80GB", choices=sorted(MIG_GEOMETRIES))
    ap.add_argument("--churn-traces", default="gpushare100")
    ap.add_argument(
        "--churn-capacity", type=float, default=0.8, help="cluster size as a share of peak demand"
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
    tool = load_tool(tool_path)
    geometry = MIG_GEOMETRIES[args.model]
    nodes = load_nodes(trace_dir)[: args.nodes]
    cards = [MigCard(n.name, g.index, args.model) for n in nodes for g in n.gpus]
    print(
        f"MIG packing vs first-fit: {len(cards)} {args.model} cards (dynamic, empty at the start)"
    )
    header = f"{'trace':12s} {'seed':>4s} {'policy':9s} {'alloc@100%':>10s} {'alloc@end':>9s} {'7g unplaced':>11s} {'7g-free cards':>13s} {'dec/s':>8s}"
    for trace in [t.strip() for t in args.traces.split(",") if t.strip()]:
        csv_path = trace_dir / f"openb_pod_list_{trace}.csv"
        for seed in parse_seeds(args.seeds):
            pods, _prefix = tool.build(str(csv_path), seed, [n.name for n in nodes])
            pods = every_kth(pods, args.pods)
            requests, skipped = mig_requests(pods, geometry)
            mix = Counter(r.profile for r in requests)
            print(
                f"\n{trace} seed {seed}: {len(requests)} requests "
                f"({', '.join(f'{p} {mix[p]}' for p in sorted(mix, key=lambda p: geometry.profiles.index(geometry.profile(p))))}); "  # type: ignore[arg-type]
                f"left out: {dict(skipped)}"
            )
            print(header)
            results = {}
            for policy in (MigPolicy.FIRST_FIT, MigPolicy.PACKING):
                res = run(cards, requests, policy, geometry)
                results[policy] = res
                print(
                    f"{trace:12s} {seed:4d} {policy.value:9s} {res['at_full']:10.2%} {res['at_end']:9.2%} "
                    f"{res['whole_unplaced']:11d} {res['whole_placeable_cards']:13d} {res['decisions_per_s']:8.0f}"
                )
            ff, pk = results[MigPolicy.FIRST_FIT], results[MigPolicy.PACKING]
            print(
                f"packing / first-fit: alloc@100% {pk['at_full'] / ff['at_full']:.3f}x, "
                f"alloc@end {pk['at_end'] / ff['at_end']:.3f}x, "
                f"7g unplaced {pk['whole_unplaced']} vs {ff['whole_unplaced']}, "
                f"speed {pk['decisions_per_s'] / ff['decisions_per_s']:.2f}x"
            )
    sizes = {p.name: p.compute_slices for p in geometry.profiles}
    order = [p.name for p in geometry.profiles]
    for trace in [t.strip() for t in args.churn_traces.split(",") if t.strip()]:
        events = churn_events(trace_dir / f"openb_pod_list_{trace}.csv", geometry, args.pods)
        peak = peak_demand(events, sizes)
        n_cards = max(1, round(peak * args.churn_capacity / MIG_COMPUTE_SLICES))
        churn_cards = [MigCard(f"node-{c // 8:04d}", c % 8, args.model) for c in range(n_cards)]
        print(
            f"\nchurn {trace}: {len(events) // 2} requests, peak demand {peak / MIG_COMPUTE_SLICES:.0f} GPUs, "
            f"{n_cards} cards ({args.churn_capacity:.0%} of the peak)"
        )
        out = {}
        for policy in (MigPolicy.FIRST_FIT, MigPolicy.PACKING):
            res = run_churn(churn_cards, events, policy, sizes)
            out[policy] = res
            by_profile = ", ".join(f"{p} {res['rejected'][p]}" for p in order if res["rejected"][p])
            print(
                f"  {policy.value:9s} rejected {sum(res['rejected'].values()):5d} requests, "
                f"{res['rejected_share']:.2%} of the GPU-equivalents asked ({by_profile})"
            )
        ff, pk = out[MigPolicy.FIRST_FIT], out[MigPolicy.PACKING]
        ratio = (
            pk["rejected_share"] / ff["rejected_share"] if ff["rejected_share"] else float("nan")
        )
        print(f"  packing / first-fit rejected GPU-equivalents: {ratio:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
