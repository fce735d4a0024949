"""KAI-Scheduler's scale scenarios end to end on the service, each time printed beside KAI's published figure.

    python -m bench.scale [--nodes 500,2000] [--scenarios placed,reclaim-gang,reclaim-one,unschedulable,topology]
                          [--database-url postgres://postgres@127.0.0.1:5432/tessera_scale] [--timeout 1800]

Runs on PostgreSQL (a separate database, created and migrated if needed, wiped of the bench's rows), the
simulated backend and the in-process cycle: Celery runs eagerly (``TESSERA_CELERY_EAGER``), so a submission's
cycle trigger and every follow-up (materialising pods on the simulated cluster, releases) run in this
process, and the bench calls ``scheduling.services.run_cycle`` until the scenario's condition holds. The
cluster: ``--nodes`` nodes of 8 H100, labelled in racks of 16 nodes and blocks of 4 racks
(``tessera.io/topology-rack`` / ``-block``). KAI publishes its daily scale tests on 500 simulated nodes
(KWOK); each scenario is sized as KAI's at 500 nodes and scaled with the cluster where KAI's is a share of it:

1. ``placed``: 8 × nodes single-GPU jobs queued at once (4,000 at 500 nodes) until all are placed (KAI: 6m37s);
2. ``reclaim-gang``: the cluster full of a lending quota's 8-GPU jobs; a quota guaranteed half the
   cluster submits one job of nodes / 2 pods × 8 GPUs (250 pods, 2,000 GPUs at 500 nodes; at most 512
   pods, the largest job Tessera accepts): time until all its pods are placed (KAI: 51.8 s);
3. ``reclaim-one``: the cluster full of single-GPU jobs (4,000 at 500 nodes); a guaranteed quota submits one
   single-GPU job: time until it is placed (KAI: 4.21 s);
4. ``unschedulable``: on the full cluster, a job that cannot fit now: time until its waiting reason is
   written (KAI: 9.12 s);
5. ``topology``: 51 distributed jobs of 8 pods × 8 GPUs requiring one rack (fewer when the cluster has
   room for fewer: two per rack), on an empty cluster (KAI: 51 jobs on 512 nodes in 11m05s).

Scenarios on a full cluster run one idle cycle after the fill before they are timed, as a service
cycling every few seconds has between bursts (it keeps the worker's readings of the pool warm).

Printed per cluster size and scenario: what was done, Tessera's wall time (submission to the condition,
pods made on the simulated cluster included), this process's CPU time over it, the time until the last
placement was committed, KAI's time, and KAI / Tessera (wall). On a shared machine the wall time is mostly
waiting for the CPU: compare the CPU column too.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.service import POOL, _ensure_database, _truncate

KAI_SECONDS = {
    "placed": 6 * 60 + 37,
    "reclaim-gang": 51.8,
    "reclaim-one": 4.21,
    "unschedulable": 9.12,
    "topology": 11 * 60 + 5,
}
SCENARIOS = tuple(KAI_SECONDS)
RACK_NODES = 16
BLOCK_RACKS = 4
SINGLE = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000}


@dataclass(frozen=True)
class Outcome:
    scenario: str
    what: str
    seconds: float
    cycles: int
    cpu_seconds: float = 0.0
    """CPU time of this process (the cycle, the follow-ups, the ORM; not PostgreSQL's) over the same span."""
    committed_seconds: float | None = None
    """Until the last of its placements was committed (`placed_at`), before the pods were made."""


Start = tuple[float, float, Any]


def _start() -> Start:
    from django.utils import timezone

    return time.perf_counter(), time.process_time(), timezone.now()


def _outcome(scenario: str, what: str, start: Start, cycles: int, **placed_filter: Any) -> Outcome:
    from django.db.models import Max

    from scheduling.models import Workload

    committed = None
    if placed_filter:
        last = Workload.objects.filter(**placed_filter).aggregate(m=Max("placed_at"))["m"]
        committed = (last - start[2]).total_seconds() if last else None
    return Outcome(
        scenario,
        what,
        time.perf_counter() - start[0],
        cycles,
        time.process_time() - start[1],
        committed,
    )


def _setup(args: argparse.Namespace) -> None:
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["TESSERA_CELERY_EAGER"] = "1"
    os.environ["TESSERA_BACKEND"] = "simulated"
    os.environ["TESSERA_SIM_START_DELAY_SECONDS"] = "3600"  # placement is what is timed
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ.setdefault("TESSERA_VAR_DIR", "/tmp/tessera-bench-scale")
    _ensure_database(args.database_url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def _cluster(nodes: int) -> None:
    from scheduling.backends.base import GpuInventory, NodeInventory
    from scheduling.inventory import sync_inventory_rows
    from scheduling.models import Node

    _truncate()
    Node.objects.all().delete()
    inv = []
    for i in range(nodes):
        rack = i // RACK_NODES
        inv.append(
            NodeInventory(
                name=f"scale-{i:05d}",
                cpu_milli=192000,
                memory_mib=2_097_152,
                gpu_model="H100",
                labels=(
                    ("pool", POOL),
                    ("tessera.io/topology-block", f"block-{rack // BLOCK_RACKS}"),
                    ("tessera.io/topology-rack", f"rack-{rack}"),
                ),
                gpus=tuple(
                    GpuInventory(j, f"GPU-scale-{i}-{j}", "H100", 81920, j // 4, j // 4)
                    for j in range(8)
                ),
            )
        )
    sync_inventory_rows(inv)


def _quotas(guaranteed_gpus: int) -> tuple[Any, Any]:
    """Wipe the bench's rows; a lending quota (no guarantee) and a quota guaranteed `guaranteed_gpus`."""
    from portal.models import Tenant
    from quotas.models import Quota, QuotaGroup
    from scheduling.services.snapshot import bump_all_shards

    _truncate()
    Quota.objects.filter(group__name=POOL).delete()
    group, _ = QuotaGroup.objects.get_or_create(
        name=POOL, defaults={"node_selector": {"pool": POOL}}
    )
    big = 10**12
    limits = {
        f: big
        for f in (
            "gpu_max_gpu_milli", "gpu_max_gpu_memory_mib", "gpu_max_cpu_milli",
            "gpu_max_memory_mib", "cpu_max_cpu_milli", "cpu_max_memory_mib",
        )
        if hasattr(Quota, f)
    }  # fmt: skip
    out = []
    for slug, gpus in (("lender", 0), ("owner", guaranteed_gpus)):
        tenant, _ = Tenant.objects.get_or_create(slug=f"scale-{slug}", defaults={"name": slug})
        out.append(
            Quota.objects.create(
                group=group,
                tenant=tenant,
                name=f"scale-{slug}",
                gpu_min_gpu_milli=gpus * 1000,
                **limits,
            )
        )
    bump_all_shards()
    return out[0], out[1]


def _cycles_until(group_id: int, done: Callable[[], bool], timeout: float) -> tuple[float, int]:
    """Run the group's cycle until `done()`; (seconds from the call, cycles run)."""
    from scheduling import services

    t0 = time.perf_counter()
    cycles = 0
    while not done():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"not done after {timeout:.0f} s and {cycles} cycles")
        services.run_cycle(group_id)
        cycles += 1
    return time.perf_counter() - t0, cycles


def _placed(**filters: Any) -> int:
    from scheduling.models import Workload

    return Workload.objects.filter(state__in=("placed", "running"), **filters).count()


def _fill(quota: Any, n: int, timeout: float, gpus: int = 1) -> float:
    """Queue `n` jobs of `gpus` whole GPUs of `quota` at once (no triggers) and cycle until all are
    placed."""
    from bench.service import _queue
    from scheduling import services

    _queue(quota, [{**SINGLE, "gpu_count": gpus}] * n, "fill-")
    seconds, _ = _cycles_until(quota.group_id, lambda: _placed(quota=quota) >= n, timeout)
    # A running service cycles every few seconds: the cluster stands for one idle cycle (which keeps
    # the worker's readings of the pool warm) before the scenario's submission, as it would there.
    services.run_cycle(quota.group_id)
    return seconds


def _submit(quota: Any, name: str, pods: int, gpus: int, **kw: Any) -> Any:
    from scheduling import services

    member = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": gpus, "gpu_milli": 1000}
    return services.submit_gang(
        tenant=quota.tenant, quota=quota, name=name, owner=None, members=[member] * pods,
        min_available=pods, timeout_seconds=3600, **kw,
    )  # fmt: skip


def placed(nodes: int, timeout: float) -> Outcome:
    lender, _ = _quotas(0)
    n = 8 * nodes
    from bench.service import _queue

    t0 = _start()
    _queue(lender, [SINGLE] * n, "job-")
    _, cycles = _cycles_until(lender.group_id, lambda: _placed() >= n, timeout)
    return _outcome("placed", f"{n:,} single-GPU jobs placed", t0, cycles, quota=lender)


def reclaim_gang(nodes: int, timeout: float) -> Outcome:
    from scheduling.services.workloads import MAX_GANG_MEMBERS

    # half the cluster, as KAI's at 500 nodes, up to the largest job Tessera accepts (512 pods)
    pods = min(nodes // 2, MAX_GANG_MEMBERS)
    lender, owner = _quotas(pods * 8)
    # whole-node jobs: reclaim stops whole jobs by quota share, not by where they run, so single-GPU
    # victims would leave the freed GPUs scattered and no 8-GPU pod could start
    _fill(lender, nodes, timeout, gpus=8)
    t0 = _start()
    gang = _submit(owner, "big", pods, 8)
    _, cycles = _cycles_until(owner.group_id, lambda: _placed(gang=gang) >= pods, timeout)
    return _outcome(
        "reclaim-gang",
        f"reclaim for one {pods * 8:,}-GPU job of {pods} pods",
        t0,
        cycles,
        gang=gang,
    )


def reclaim_one(nodes: int, timeout: float) -> Outcome:
    lender, owner = _quotas(1)
    _fill(lender, 8 * nodes, timeout)
    t0 = _start()
    gang = _submit(owner, "one", 1, 1)
    _, cycles = _cycles_until(owner.group_id, lambda: _placed(gang=gang) >= 1, timeout)
    return _outcome(
        "reclaim-one",
        f"single-GPU reclaim with {8 * nodes:,} jobs running",
        t0,
        cycles,
        gang=gang,
    )


def unschedulable(nodes: int, timeout: float) -> Outcome:
    from scheduling.models import Workload

    lender, _ = _quotas(0)
    _fill(lender, 8 * nodes, timeout)
    t0 = _start()
    gang = _submit(lender, "late", 1, 1)

    def reported() -> bool:
        codes = set(Workload.objects.filter(gang=gang).values_list("pending_code", flat=True))
        return bool(codes) and "queued" not in codes

    _, cycles = _cycles_until(lender.group_id, reported, timeout)
    code = Workload.objects.filter(gang=gang).values_list("pending_code", flat=True).first()
    return _outcome(
        "unschedulable",
        f"a job reported unschedulable ({code}) on a full cluster",
        t0,
        cycles,
    )


def topology(nodes: int, timeout: float) -> Outcome:
    from scheduling.models import Placement

    lender, _ = _quotas(0)
    jobs = min(51, 2 * (nodes // RACK_NODES))
    t0 = _start()
    gangs = [_submit(lender, f"dist-{j}", 8, 8, topology_level="rack") for j in range(jobs)]
    _, cycles = _cycles_until(lender.group_id, lambda: _placed() >= 8 * jobs, timeout)
    out = _outcome(
        "topology",
        f"{jobs} distributed jobs (8 pods × 8 GPUs, one rack each)",
        t0,
        cycles,
        gang__in=gangs,
    )
    for gang in gangs:
        racks = set(
            Placement.objects.filter(workload__gang=gang, released_at__isnull=True).values_list(
                "node__labels__tessera.io/topology-rack", flat=True
            )
        )
        if len(racks) != 1:
            raise AssertionError(f"{gang.name} spans racks {sorted(map(str, racks))}")
    return out


RUNS: dict[str, Callable[[int, float], Outcome]] = {
    "placed": placed,
    "reclaim-gang": reclaim_gang,
    "reclaim-one": reclaim_one,
    "unschedulable": unschedulable,
    "topology": topology,
}


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s" if seconds >= 60 else f"{seconds:.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="500,2000")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/tessera_scale"
    )
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in scenarios if s not in RUNS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
    sizes = [int(n) for n in args.nodes.split(",")]
    _setup(args)
    print("# bench.scale: PostgreSQL, simulated backend, in-process cycle (Celery eager)")
    print(
        f"{'nodes':>6}  {'scenario':<14} {'what':<58} {'Tessera':>10} {'(CPU)':>10} "
        f"{'committed':>10} {'KAI (500)':>10} {'KAI/T':>7}"
    )
    for nodes in sizes:
        _cluster(nodes)
        for name in scenarios:
            kai = KAI_SECONDS[name]
            try:
                out = RUNS[name](nodes, args.timeout)
            except TimeoutError as exc:
                print(f"{nodes:>6}  {name:<14} {exc}", flush=True)
                continue
            committed = "—" if out.committed_seconds is None else _clock(out.committed_seconds)
            print(
                f"{nodes:>6}  {name:<14} {out.what:<58} {_clock(out.seconds):>10} "
                f"{_clock(out.cpu_seconds):>10} {committed:>10} {_clock(kai):>10} "
                f"{kai / out.seconds:6.1f}×  "
                f"({out.cycles} more cycles than the submissions triggered)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
