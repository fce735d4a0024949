"""Topology-aware gang placement against topology-blind placement on the same arrival sequence.

    python -m bench.topology [--blocks 2] [--racks 4] [--nodes 8] [--arrivals 600] [--seeds 1-2]
                             [--node-order shuffled|racks]

The cluster: ``--blocks`` blocks of ``--racks`` racks of ``--nodes`` nodes with 8 whole GPUs each; every two
nodes of a rack share an NVLink domain (levels block → rack → nvlink). Node names follow purchase order, not
the racks (``--node-order shuffled``, seeded) or the racks (``racks``). Distributed jobs arrive one per step
(seeded): 1, 2, 4, 8 or 16 pods of 8 GPUs, or 2-8 pods of 4 GPUs, each running 10-60 steps (seeded); every
step releases the finished jobs and tries the waiting ones in arrival order (first 32). Three runs on the same
sequence, one plan per job with the ``tessera`` policy:

* ``blind``: gangs without topology (the engine before topology-aware gangs);
* ``preferred``: every gang prefers one rack (the tightest domain that fits, else anywhere);
* ``required``: gangs of up to one rack require one rack; larger ones prefer one block.

Printed per run (mean over seeds): jobs placed, share of placed multi-node jobs inside one NVLink domain / one
rack / one block, mean racks a job spans, mean steps waited, GPU utilisation over the run, and engine
milliseconds per job; each as a ratio against ``blind`` measured in the same run.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.placement import (
    Assignment,
    ClusterState,
    GangSpec,
    GangTopology,
    GpuSpec,
    NodeSpec,
    PlacementRequest,
    TopologyLevel,
    TopologyMode,
    plan_placements,
)

LEVELS = (
    TopologyLevel("block", "tessera.io/topology-block"),
    TopologyLevel("rack", "tessera.io/topology-rack"),
    TopologyLevel("nvlink", "nvidia.com/gpu.clique"),
)
MODES = ("blind", "preferred", "required")
QUEUE_TRIES = 32


def make_nodes(blocks: int, racks: int, nodes: int, order: str, seed: int) -> list[NodeSpec]:
    """The synthetic cluster; node ``i`` of the name order sits where ``order`` puts it."""
    spots = [(b, r, n) for b in range(blocks) for r in range(racks) for n in range(nodes)]
    if order == "shuffled":
        random.Random(seed).shuffle(spots)
    out = []
    for i, (b, r, n) in enumerate(spots):
        labels = (
            ("tessera.io/topology-block", f"b{b}"),
            ("tessera.io/topology-rack", f"b{b}-r{r}"),
            ("nvidia.com/gpu.clique", f"b{b}-r{r}-c{n // 2}"),
        )
        gpus = tuple(GpuSpec(j, "H100", 81920, numa_node=j // 4) for j in range(8))
        out.append(NodeSpec(f"node-{i:05d}", 192000, 2_097_152, gpus, "H100", labels))
    return out


@dataclass(frozen=True)
class Job:
    name: str
    pods: int
    gpus: int
    duration: int
    arrival: int


def make_jobs(arrivals: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    out = []
    for t in range(arrivals):
        if rng.random() < 0.3:
            pods, gpus = rng.choice((2, 4, 6, 8)), 4
        else:
            pods, gpus = rng.choices((1, 2, 4, 8, 16), weights=(30, 25, 20, 15, 10))[0], 8
        out.append(Job(f"j{t}", pods, gpus, rng.randint(10, 60), t))
    return out


def topology_for(job: Job, mode: str, rack_gpus: int) -> GangTopology | None:
    if mode == "blind":
        return None
    if mode == "preferred" or job.pods * job.gpus > rack_gpus:
        level = "rack" if mode == "preferred" else "block"
        return GangTopology(level, TopologyMode.PREFERRED)
    return GangTopology("rack", TopologyMode.REQUIRED)


@dataclass
class Result:
    placed: int = 0
    multi_node: int = 0
    in_nvlink: int = 0
    in_rack: int = 0
    in_block: int = 0
    racks_spanned: int = 0
    waited: int = 0
    used_gpu_steps: int = 0
    capacity_gpu_steps: int = 0
    engine_seconds: float = 0.0
    plans: int = 0
    running: dict[str, tuple[int, list[Assignment]]] = field(default_factory=dict)


def run(nodes: list[NodeSpec], jobs: Sequence[Job], mode: str, rack_gpus: int) -> Result:
    state = ClusterState.from_nodes(nodes)
    labels = {nd.name: dict(nd.labels) for nd in nodes}
    total_gpus = sum(len(nd.gpus) for nd in nodes)
    res = Result()
    queue: list[Job] = []
    used = 0
    horizon = len(jobs)
    for now in range(horizon):
        for name, (end, assignments) in list(res.running.items()):
            if end <= now:
                for a in assignments:
                    state.release(a)
                used -= sum(len(a.gpu_indices) for a in assignments)
                del res.running[name]
        queue.append(jobs[now])
        for job in list(queue[:QUEUE_TRIES]):
            reqs = [
                PlacementRequest(f"{job.name}-{i}", 1000, 1024, job.gpus, 1000)
                for i in range(job.pods)
            ]
            gang = GangSpec(
                job.name,
                tuple(r.request_id for r in reqs),
                job.pods,
                topology_for(job, mode, rack_gpus),
            )
            start = time.perf_counter()
            plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
            res.engine_seconds += time.perf_counter() - start
            res.plans += 1
            if not plan.placements:
                continue
            for a in plan.placements:
                state.apply(a)
            used += job.pods * job.gpus
            res.running[job.name] = (now + job.duration, list(plan.placements))
            queue.remove(job)
            res.placed += 1
            res.waited += now - job.arrival
            node_names = {a.node for a in plan.placements}
            if len(node_names) > 1:
                res.multi_node += 1
                racks = {labels[n]["tessera.io/topology-rack"] for n in node_names}
                res.racks_spanned += len(racks)
                res.in_rack += len(racks) == 1
                res.in_block += (
                    len({labels[n]["tessera.io/topology-block"] for n in node_names}) == 1
                )
                res.in_nvlink += len({labels[n]["nvidia.com/gpu.clique"] for n in node_names}) == 1
        res.used_gpu_steps += used
        res.capacity_gpu_steps += total_gpus
    return res


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def figures(r: Result) -> dict[str, float]:
    multi = max(r.multi_node, 1)
    return {
        "jobs placed": r.placed,
        "multi-node jobs in one NVLink domain %": 100 * r.in_nvlink / multi,
        "multi-node jobs in one rack %": 100 * r.in_rack / multi,
        "multi-node jobs in one block %": 100 * r.in_block / multi,
        "racks a multi-node job spans": r.racks_spanned / multi,
        "steps waited per placed job": r.waited / max(r.placed, 1),
        "GPU utilisation %": 100 * r.used_gpu_steps / max(r.capacity_gpu_steps, 1),
        "engine ms per plan": 1000 * r.engine_seconds / max(r.plans, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--racks", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--arrivals", type=int, default=600)
    parser.add_argument("--seeds", default="1-2")
    parser.add_argument("--node-order", choices=("shuffled", "racks"), default="shuffled")
    args = parser.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    rack_gpus = args.nodes * 8
    n = args.blocks * args.racks * args.nodes
    print(
        f"# bench.topology: {n} nodes × 8 GPUs ({args.blocks} blocks × {args.racks} racks × "
        f"{args.nodes} nodes, node order {args.node_order}), {args.arrivals} jobs, seeds {args.seeds}"
    )
    sums: dict[str, dict[str, float]] = {m: {} for m in MODES}
    for seed in seeds:
        nodes = make_nodes(args.blocks, args.racks, args.nodes, args.node_order, seed)
        jobs = make_jobs(args.arrivals, seed)
        for mode in MODES:
            for k, v in figures(run(nodes, jobs, mode, rack_gpus)).items():
                sums[mode][k] = sums[mode].get(k, 0.0) + v / len(seeds)
    keys = list(sums["blind"])
    width = max(len(k) for k in keys)
    print(
        f"{'':{width}}  {'blind':>9}  {'preferred':>9} {'(×blind)':>8}  {'required':>9} {'(×blind)':>8}"
    )
    for k in keys:
        base = sums["blind"][k]
        cells = [f"{sums['blind'][k]:9.2f}"]
        for mode in ("preferred", "required"):
            v = sums[mode][k]
            ratio = f"{v / base:7.2f}×" if base else "      —"
            cells.append(f"{v:9.2f} {ratio:>8}")
        print(f"{k:{width}}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
