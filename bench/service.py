"""Benchmark the scheduling service end to end: PostgreSQL, Redis, a real Celery worker.

    python -m bench.service [--nodes 5000] [--batch 5000] [--baseline 200] [--rate 200] [--duration 60]
                            [--database-url postgres://postgres@127.0.0.1:5432/tessera_bench]
                            [--broker-url redis://127.0.0.1:6379/14] [--json PATH]

Three measurements on a simulated cluster of `--nodes` 8-GPU nodes (a separate database, created and
migrated if needed, wiped of the bench's rows first):

1. **batched drain**: `--batch` workloads queued with no worker running, then one cycle is triggered;
   committed placements per second = workloads placed / time until the last placement committed.
2. **baseline, one placement per cycle**: the same with the worker limited to one workload per cycle
   (TESSERA_CYCLE_MAX_WORKLOADS=1) on `--baseline` workloads, each placement triggering the next cycle —
   what a scheduler that commits one decision per cycle does. The ratio batched / baseline is reported.
3. **sustained**: `--rate` submissions per second for `--duration` seconds through
   `scheduling.services.submit_workload` (each triggers its shard's cycle on commit); submit-to-placed
   latency percentiles from `placed_at - submitted_at` of the committed rows.

Targets (issue 5): ≥ 1,000 placements/s committed on 5,000 nodes; at 200 submits/s for 60 s, p99
submit-to-placed ≤ 2 s; a 500-deep admissible queue drains at the placement rate, not one per cycle.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
POOL = "bench"


def _ensure_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def _setup_django(args: argparse.Namespace) -> None:
    os.environ["DATABASE_URL"] = args.database_url
    os.environ["CELERY_BROKER_URL"] = args.broker_url
    os.environ["REDIS_URL"] = args.cache_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["TESSERA_SIM_START_DELAY_SECONDS"] = "3600"  # keep the bench about placement
    os.environ["LOG_LEVEL"] = "WARNING"
    import django

    django.setup()


def _worker_env(args: argparse.Namespace, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=args.database_url,
        CELERY_BROKER_URL=args.broker_url,
        REDIS_URL=args.cache_url,
        TESSERA_SIM_START_DELAY_SECONDS="3600",
        TESSERA_PLACEMENT_POLICY=args.policy,
        LOG_LEVEL="WARNING",
        **extra,
    )
    return env


class Worker:
    """The deployment the service is built for: one single-process worker on the shard queues (its
    snapshot stays warm: every cycle of a shard runs in the same process) and one on `default`
    (materialize, release, status)."""

    def __init__(self, args: argparse.Namespace, **extra: str) -> None:
        from scheduling.queues import shard_queues

        self.log = ROOT / "var" / "bench-worker.log"
        self.log.parent.mkdir(exist_ok=True)
        self.procs = [
            self._start(args, ",".join(shard_queues()), "sched", extra),
            self._start(args, "default", "default", extra),
        ]
        from portal.celery import app

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if len(app.control.ping(timeout=1.0)) >= len(self.procs):
                return
        raise RuntimeError(f"workers did not start; see {self.log}")

    def _start(
        self, args: argparse.Namespace, queues: str, name: str, extra: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", queues, "-c", "1",
            "--without-gossip", "--without-mingle", "--loglevel=WARNING",
            "-n", f"bench-{name}-{os.getpid()}@%h",
        ]  # fmt: skip
        return subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=_worker_env(args, **extra),
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _purge() -> None:
    """Empty every queue the workers consume (left-over cycle triggers would skew the next run)."""
    from portal.celery import app
    from scheduling.queues import worker_queues

    with app.connection_for_write() as conn:
        for queue in worker_queues():
            try:
                conn.default_channel.queue_purge(queue)
            except Exception:  # a queue never declared has nothing to purge
                pass


def _truncate() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "TRUNCATE scheduling_placementgpu, scheduling_placement, scheduling_simulatedpod, "
            "scheduling_workload, scheduling_gang RESTART IDENTITY CASCADE"
        )


def _reset_rows() -> tuple[Any, Any]:
    """Wipe the bench's rows and (re)create a group and a quota with room for everything."""
    from portal.models import Tenant
    from quotas.models import Quota, QuotaGroup

    _truncate()
    tenant, _ = Tenant.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    group, _ = QuotaGroup.objects.get_or_create(
        name=POOL, defaults={"node_selector": {"pool": POOL}}
    )
    quota = Quota.objects.filter(group=group, tenant=tenant).first()
    if quota is None:
        big = 10**12
        fields = {
            f: big
            for f in (
                "gpu_max_gpu_milli", "gpu_max_gpu_memory_mib", "gpu_max_cpu_milli",
                "gpu_max_memory_mib", "cpu_max_cpu_milli", "cpu_max_memory_mib",
            )
            if hasattr(Quota, f)
        }  # fmt: skip
        quota = Quota.objects.create(group=group, tenant=tenant, name="bench", **fields)
    from scheduling.services.snapshot import bump_all_shards

    bump_all_shards()
    return group, quota


def _ensure_cluster(nodes: int) -> None:
    from scheduling.backends.base import GpuInventory, NodeInventory
    from scheduling.inventory import sync_inventory_rows
    from scheduling.models import Node

    if Node.objects.filter(pool=POOL).count() == nodes:
        return
    _truncate()
    Node.objects.filter(pool=POOL).delete()
    models = [("A100", 81920), ("H100", 81920), ("L40S", 46080), ("T4", 15360)]
    inv = []
    for i in range(nodes):
        model, mem = models[i % len(models)]
        inv.append(
            NodeInventory(
                name=f"bench-{i:05d}",
                cpu_milli=96000,
                memory_mib=786432,
                gpu_model=model,
                labels=(("pool", POOL),),
                gpus=tuple(
                    GpuInventory(j, f"GPU-bench-{i}-{j}", model, mem, j // 4, j // 4)
                    for j in range(8)
                ),
            )
        )
    sync_inventory_rows(inv)


def _specs(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.5:
            spec = {"gpu_count": 1, "gpu_milli": rng.choice([250, 500]), "gpu_memory_mib": 8192}
        elif r < 0.9:
            spec = {"gpu_count": rng.choice([1, 2, 4]), "gpu_milli": 1000}
        else:
            spec = {}
        out.append({"cpu_milli": rng.choice([1000, 4000]), "memory_mib": 8192, **spec})
    return out


def _queue(quota: Any, specs: list[dict[str, Any]], prefix: str) -> None:
    """Insert PENDING workloads without triggering cycles (as if they piled up while no worker ran):
    one bulk insert of rows validated like submit_workload's."""
    from scheduling.models import Workload
    from scheduling.services.workloads import validate_resources

    rows = []
    for i, spec in enumerate(specs):
        res = validate_resources(
            cpu_milli=spec["cpu_milli"],
            memory_mib=spec["memory_mib"],
            gpu_count=spec.get("gpu_count", 0),
            gpu_milli=spec.get("gpu_milli", 0),
            gpu_memory_mib=spec.get("gpu_memory_mib", 0),
            gpu_models=(),
            node_labels=None,
            topology="none",
            priority=0,
            profile="training",
        )
        rows.append(
            Workload(
                tenant=quota.tenant,
                quota=quota,
                kind="job_pod",
                name=f"{prefix}{i}",
                pending_reason="Waiting for the next scheduling cycle.",
                pending_code="queued",
                **res,
            )
        )
    Workload.objects.bulk_create(rows, batch_size=1000)


def _wait_placed(n: int, timeout: float) -> float:
    from scheduling.models import Workload

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Workload.objects.filter(state="placed").count() >= n:
            return time.monotonic()
        time.sleep(0.05)
    raise TimeoutError(f"fewer than {n} placed after {timeout}s")


def _commit_span(n: int) -> tuple[float, int]:
    """Seconds between the first and the last committed placement, and how many were placed."""
    from django.db.models import Max, Min

    from scheduling.models import Workload

    agg = Workload.objects.filter(state="placed").aggregate(a=Min("placed_at"), b=Max("placed_at"))
    placed = Workload.objects.filter(state="placed").count()
    span = (agg["b"] - agg["a"]).total_seconds() if agg["a"] else 0.0
    return span, placed


def _warm(args: argparse.Namespace, group: Any) -> None:
    """Warm the worker as a running service is: a first cycle with nothing pending builds its snapshot
    of the cluster and reads the group's capacity (beat's idle cycles keep them warm)."""
    from scheduling.models import Shard
    from scheduling.queues import queue_for_group
    from scheduling.tasks import run_cycle_task

    before = Shard.objects.filter(group=group).values_list("last_cycle_at", flat=True).first()
    run_cycle_task.apply_async((group.pk,), queue=queue_for_group(group.pk))
    deadline = time.monotonic() + args.timeout
    while (
        Shard.objects.filter(group=group).values_list("last_cycle_at", flat=True).first() == before
    ):
        if time.monotonic() > deadline:
            raise TimeoutError("the warm-up cycle did not run")
        time.sleep(0.1)


def drain(
    args: argparse.Namespace, group: Any, quota: Any, n: int, **worker_env: str
) -> dict[str, Any]:
    """Queue `n` workloads, start a worker, trigger one cycle, time until all are placed."""
    from scheduling.models import Shard
    from scheduling.queues import queue_for_group
    from scheduling.tasks import run_cycle_task

    worker = Worker(args, **worker_env)
    try:
        _warm(args, group)
        _queue(quota, _specs(n, seed=n), "d")
        t0 = time.monotonic()
        run_cycle_task.apply_async((group.pk,), queue=queue_for_group(group.pk))
        t1 = _wait_placed(n, timeout=args.timeout)
    finally:
        worker.stop()
        _purge()
    wall = t1 - t0
    span, placed = _commit_span(n)
    shard = Shard.objects.get(group=group)
    return {
        "workloads": n,
        "placed": placed,
        "wall_seconds": round(wall, 3),
        "placements_per_second": round(placed / wall, 1) if wall else None,
        "commit_span_seconds": round(span, 3),
        "last_cycle_ms": shard.last_cycle_ms,
    }


def baseline(args: argparse.Namespace, group: Any, quota: Any, n: int) -> dict[str, Any]:
    """One placement per cycle: each cycle places one workload and its commit triggers the next."""
    from scheduling.services import workloads

    _queue(quota, _specs(n, seed=n + 1), "b")
    # each placement's commit enqueues the next cycle, as a one-decision-per-cycle scheduler would
    worker = Worker(args, TESSERA_CYCLE_MAX_WORKLOADS="1")
    try:
        from scheduling.queues import queue_for_group
        from scheduling.tasks import run_cycle_task

        t0 = time.monotonic()
        # A steady stream of triggers (what submits/releases and beat would send).
        stop = threading.Event()

        def poke() -> None:
            while not stop.is_set():
                run_cycle_task.apply_async((group.pk,), queue=queue_for_group(group.pk))
                time.sleep(0.002)

        pusher = threading.Thread(target=poke, daemon=True)
        pusher.start()
        t1 = _wait_placed(n, timeout=args.timeout)
        stop.set()
        pusher.join()
    finally:
        worker.stop()
        _purge()
    del workloads
    wall = t1 - t0
    return {
        "workloads": n,
        "wall_seconds": round(wall, 3),
        "placements_per_second": round(n / wall, 1) if wall else None,
    }


def sustained(args: argparse.Namespace, group: Any, quota: Any) -> dict[str, Any]:
    """Submit at `--rate`/s for `--duration` s through the service; latency = placed_at - submitted_at."""
    from django.db import connection

    from scheduling.models import Workload
    from scheduling.services import submit_workload

    worker = Worker(args)
    specs = _specs(int(args.rate * args.duration), seed=99)
    counts = [0] * args.submitters
    lags = [0.0] * args.submitters
    try:
        _warm(args, group)
        t0 = time.monotonic() + 0.5

        def submitter(k: int) -> None:
            try:
                for i in range(k, len(specs), args.submitters):
                    due = t0 + i / args.rate
                    now = time.monotonic()
                    if due > now:
                        time.sleep(due - now)
                    else:
                        lags[k] = max(lags[k], now - due)
                    submit_workload(
                        tenant=quota.tenant, quota=quota, kind="job_pod", name=f"s{i}", **specs[i]
                    )
                    counts[k] += 1
            finally:
                connection.close()

        threads = [threading.Thread(target=submitter, args=(k,)) for k in range(args.submitters)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        send_seconds = time.monotonic() - t0
        submitted = sum(counts)
        late = max(lags)
        _wait_placed(submitted, timeout=args.timeout)
    finally:
        worker.stop()
        _purge()
        connection.close()
    lat = sorted(
        (w.placed_at - w.submitted_at).total_seconds()
        for w in Workload.objects.filter(state="placed").only("placed_at", "submitted_at")
        if w.placed_at is not None
    )

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p / 100 * len(lat)))], 3) if lat else float("nan")

    return {
        "rate_per_second": args.rate,
        "submitter_threads": args.submitters,
        "duration_seconds": args.duration,
        "submitted": submitted,
        "achieved_rate": round(submitted / send_seconds, 1),
        "max_send_lag_seconds": round(late, 3),
        "latency_p50": pct(50),
        "latency_p90": pct(90),
        "latency_p99": pct(99),
        "latency_max": round(lat[-1], 3) if lat else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--batch", type=int, default=5000)
    p.add_argument("--baseline", type=int, default=200)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument(
        "--submitters", type=int, default=8, help="threads submitting in the sustained run"
    )
    p.add_argument(
        "--policy",
        default="tessera",
        help="placement policy of the worker (TESSERA_PLACEMENT_POLICY)",
    )
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument(
        "--database-url",
        default=os.environ.get(
            "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tessera_bench"
        ),
    )
    p.add_argument(
        "--broker-url", default=os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/14")
    )
    p.add_argument(
        "--cache-url", default=os.environ.get("BENCH_CACHE_URL", "redis://127.0.0.1:6379/13")
    )
    p.add_argument("--skip", default="", help="comma-separated: batch,baseline,sustained")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if not args.database_url.startswith("postgres"):
        p.error("the service bench runs against PostgreSQL (--database-url postgres://...)")
    _ensure_database(args.database_url)
    _setup_django(args)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    skip = set(filter(None, args.skip.split(",")))
    t = time.monotonic()
    _ensure_cluster(args.nodes)
    print(f"cluster: {args.nodes} nodes × 8 GPUs ready in {time.monotonic() - t:.1f} s")
    _purge()
    results: dict[str, Any] = {"nodes": args.nodes, "policy": args.policy}
    if "batch" not in skip:
        group, quota = _reset_rows()
        results["batched"] = drain(args, group, quota, args.batch)
        print("batched drain:", results["batched"])
    if "baseline" not in skip:
        group, quota = _reset_rows()
        results["one_per_cycle"] = baseline(args, group, quota, args.baseline)
        print("one placement per cycle:", results["one_per_cycle"])
        if "batched" in results and results["one_per_cycle"]["placements_per_second"]:
            results["batched_vs_one_per_cycle"] = round(
                results["batched"]["placements_per_second"]
                / results["one_per_cycle"]["placements_per_second"],
                1,
            )
            print(f"ratio batched / one-per-cycle: {results['batched_vs_one_per_cycle']}x")
    if "sustained" not in skip:
        group, quota = _reset_rows()
        results["sustained"] = sustained(args, group, quota)
        print("sustained:", results["sustained"])
    results["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    print("load average (1, 5, 15 min):", results["load_average_1_5_15"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
