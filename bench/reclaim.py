"""Reclaim for a gang of whole-node pods on a pool full of single-GPU borrowed jobs: node by node vs by share.

    python -m bench.reclaim [--nodes 500] [--pods 250] [--repeat 3]

The pool: ``--nodes`` nodes of 8 GPUs, every GPU held by one single-GPU preemptible job of team B (no min),
started round-robin over the nodes (the newest are spread over every node). Team A (min = the gang's GPUs)
submits a gang of ``--pods`` pods of 8 whole GPUs. One cycle's decide step (`scheduling.services.decide`,
pure, no database) is run twice on the same input in the same process: with the placements of the running
work known (victims chosen node by node, as the cycle does) and without (victims by quota share alone, the
old rule). Printed for each: the victims, the nodes they free, how many of the gang's pods the engine places
once they stopped, and the decide time (best of ``--repeat``), with the ratio node-by-node / share-only.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

CARD_MIB = 40960
BIG = 10**12
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def build(nodes: int, pods: int) -> tuple[Any, dict[int, str]]:
    """The cycle input (with the running placements known) and each job's node."""
    from core.placement import Assignment, ClusterState, GpuSpec, NodeSpec, PlacementRequest
    from quotas.resources import Resources, Side
    from quotas.usage import GroupCapacity, QuotaSpec, WorkloadUsage, build_snapshot
    from scheduling.services.decide import CycleInput, PendingWorkload

    def spec(quota_id: int, name: str, gpu_min: int) -> QuotaSpec:
        open_side = Resources(BIG, BIG, BIG, BIG)
        return QuotaSpec(
            quota_id=quota_id,
            name=name,
            tenant_id=quota_id,
            tenant_slug=name,
            lend_idle_min=True,
            min={
                Side.GPU: Resources(gpu_milli=gpu_min * 1000, gpu_memory_mib=gpu_min * CARD_MIB),
                Side.CPU: Resources(),
            },
            max={Side.GPU: open_side, Side.CPU: open_side},
            weight={Side.GPU: Resources(1, 1, 1, 1), Side.CPU: Resources(1, 1, 1, 1)},
        )

    def usage(wid: int, quota_id: int, gpus: int, started: int | None, gang: int | None) -> Any:
        return WorkloadUsage(
            workload_id=wid,
            name=f"w{wid}",
            kind="job_pod",
            quota_id=quota_id,
            side=Side.GPU,
            resources=Resources(gpus * 1000, gpus * CARD_MIB, 1000, 1024),
            active=started is not None,
            gang_id=gang,
            gang_name=f"gang{gang}" if gang else "",
            started_at=T0 + timedelta(seconds=started) if started is not None else None,
        )

    state = ClusterState.from_nodes(
        [
            NodeSpec(f"n{i}", 64000, 1 << 20, tuple(GpuSpec(j, "A100", CARD_MIB) for j in range(8)))
            for i in range(nodes)
        ]
    )
    running: dict[int, Assignment] = {}
    where: dict[int, str] = {}
    jobs = []
    for k in range(nodes * 8):
        wid = 100_000 + k
        a = Assignment(str(wid), f"n{k % nodes}", (k // nodes,), 1000, CARD_MIB, 1000, 1024)
        state.apply(a)
        running[wid], where[wid] = a, a.node
        jobs.append(usage(wid, 2, 1, k, None))
    waiting = tuple(
        PendingWorkload(
            usage=usage(i + 1, 1, 8, None, 9),
            request=PlacementRequest(str(i + 1), 1000, 1024, 8, 1000, 0),
            submitted_at=T0,
            gang_min_available=pods,
        )
        for i in range(pods)
    )
    snapshot = build_snapshot(
        group_id=1,
        group_name="pool",
        allow_overcommitted_min=False,
        capacity=GroupCapacity(
            gpu=Resources(nodes * 8000, nodes * 8 * CARD_MIB, nodes * 64000, BIG),
            cpu=Resources(0, 0, 0, 0),
        ),
        specs=[spec(1, "team-a", pods * 8), spec(2, "team-b", 0)],
        workloads=[*jobs, *(p.usage for p in waiting)],
        headroom=False,
    )
    cycle = CycleInput(
        pending=waiting, quota=snapshot, cluster=state, workloads=snapshot, running=running
    )
    return cycle, where


def run(
    cycle: Any, placed_at: dict[int, Any], where: dict[int, str], repeat: int
) -> dict[str, Any]:
    """One decide of `cycle` (best CPU time of `repeat`), and what its victims' stopping lets place."""
    from core.placement import GangSpec
    from core.placement.planner import plan_in_place
    from scheduling.services.decide import decide

    best = float("inf")
    decision = None
    for _ in range(repeat):
        t = time.process_time()
        decision = decide(cycle)
        best = min(best, time.process_time() - t)
    assert decision is not None
    victims = decision.reclaim.victim_ids if decision.reclaim else ()
    after = cycle.cluster.copy()
    for wid in victims:
        after.release(placed_at[wid])
    requests = [p.request for p in cycle.pending]
    plan = plan_in_place(
        after,
        requests,
        gangs=[GangSpec("gang9", tuple(r.request_id for r in requests), len(requests))],
    )
    return {
        "victims": len(victims),
        "nodes": len({where[w] for w in victims}),
        "placed": len(plan.placements),
        "seconds": best,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.reclaim", description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    nodes = max(1, min(args.nodes, 20000))
    pods = max(1, min(args.pods, nodes))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    cycle, where = build(nodes, pods)
    repeat = max(1, min(args.repeat, 20))
    share = run(replace(cycle, running={}), cycle.running, where, repeat)
    by_node = run(cycle, cycle.running, where, repeat)
    print(
        f"{nodes} nodes x 8 GPUs full of single-GPU borrowed jobs; a gang of {pods} pods x 8 GPUs"
    )
    print(
        f"{'victims chosen':<16}{'victims':>9}{'nodes':>8}{'pods placed after':>19}{'decide CPU s':>14}"
    )
    for label, r in (("by share", share), ("node by node", by_node)):
        print(
            f"{label:<16}{r['victims']:>9}{r['nodes']:>8}{r['placed']:>12} / {pods:<4}"
            f"{r['seconds']:>14.3f}"
        )
    print(f"decide time, node by node / by share: {by_node['seconds'] / share['seconds']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
