"""Dashboard benchmark: every dashboard page and its data endpoint on PostgreSQL, at 50 tenants, 500 nodes
and 30 days of hourly rollups.

    .venv/bin/python bench/dashboards.py [--database-url postgres://postgres@127.0.0.1:5432/tessera_bench_dash]
                                         [--requests 30] [--keep] [--json out.json] [--smoke]

`--smoke` (CI: tests/test_benches_smoke.py) runs the same steps at 3 tenants, 12 nodes, 2 days and 2
requests per scenario, and reports the target without failing on it: it proves the bench still runs.

What it does:
1. (Re)creates the PostgreSQL database (default tessera_bench_dash), migrates it and seeds: 3 pools
   (a100 250 nodes, h100 150, l4 100; 8 GPUs each = 4,000 GPUs), 50 tenants with a quota in each pool,
   and per tenant 12 codespaces (25 % slices) and 6 jobs (1–2 whole GPUs; training or inference) placed
   directly (placements + GPU shares), 40 pending jobs in all.
2. Writes 30 days of hourly rollups with `scheduling.telemetry.backfill` (the demo's synthetic history) and
   24 hours of minute rows with SQL (`generate_series`) for workloads, quotas and pools — the shape the
   minute ingestion writes, so the 24 h ranges read what a live cluster would hold.
3. In-process with Django's test client (logged-in operator, DEBUG off), requests each page's HTML and its
   JSON data endpoint (24 h = minute rows, 30 d = hour rows) `--requests` times after one warm-up, and a
   baseline measured in the same run: the API tokens page (login + one tokens query); the home page
   (the operator's status: cluster totals, pending, unhealthy GPUs, drift) is measured as a page. "cold" empties
   the payload cache before every request (each one computes its figures); "warm" is what further viewers
   polling the same page in the same minute get (the shared payload).
4. Prints p50 / p95 per request (ms) and the ratio of each cold p95 to the baseline's, and checks the
   target: every page and data endpoint cold p95 ≤ 300 ms (the page is not drawn without its data).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS = 300.0
POOLS = (("a100", "A100", 81920, 250), ("h100", "H100", 81920, 150), ("l4", "L4", 24576, 100))
TENANTS = 50
GPUS_PER_NODE = 8
HISTORY_DAYS = 30
SMOKE_POOLS = (("a100", "A100", 81920, 4), ("h100", "H100", 81920, 4), ("l4", "L4", 24576, 4))
SMOKE_TENANTS = 3
SMOKE_HISTORY_DAYS = 2


def recreate_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def seed(
    pools: tuple[tuple[str, str, int, int], ...] = POOLS, tenant_count: int = TENANTS
) -> dict[str, int]:
    """Inventory, tenants, quotas, placed workloads (runs inside Django)."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from portal.models import Tenant
    from quotas.models import Quota, QuotaGroup
    from scheduling.models import Gpu, Node, Placement, PlacementGpu, Shard, Workload

    now = timezone.now()
    with transaction.atomic():
        user = get_user_model().objects.create_user("ops", password="bench", is_staff=True)
        user.save()
        groups = {}
        nodes: dict[str, list[Node]] = {}
        for pool, model, memory, count in pools:
            groups[pool] = QuotaGroup.objects.create(name=pool, node_selector={"pool": pool})
            Shard.objects.create(group=groups[pool], version=1, last_cycle_ms=25.0)
            nodes[pool] = Node.objects.bulk_create(
                [
                    Node(
                        name=f"{pool}-{i:03d}",
                        pool=pool,
                        labels={"pool": pool},
                        cpu_milli=128000,
                        memory_mib=1024000,
                        gpu_model=model,
                    )
                    for i in range(count)
                ]
            )
            Gpu.objects.bulk_create(
                [
                    Gpu(node=n, index=j, uuid=f"GPU-{n.name}-{j}", model=model, memory_mib=memory)
                    for n in nodes[pool]
                    for j in range(GPUS_PER_NODE)
                ]
            )
        gpus: dict[str, list[Gpu]] = {
            pool: list(Gpu.objects.filter(node__pool=pool).order_by("node__name", "index"))
            for pool, *_ in pools
        }
        tenants = Tenant.objects.bulk_create(
            [Tenant(slug=f"team-{i:02d}", name=f"Team {i:02d}") for i in range(tenant_count)]
        )
        quotas = {}
        for t in tenants:
            for pool, *_ in pools:
                quotas[(t.pk, pool)] = Quota(
                    group=groups[pool],
                    tenant=t,
                    name=t.slug,
                    gpu_min_gpu_milli=20000,
                    gpu_max_gpu_milli=80000,
                )
        Quota.objects.bulk_create(list(quotas.values()))
        quotas = {(q.tenant_id, q.group.name): q for q in Quota.objects.select_related("group")}
        # packing: slices fill a GPU 4 at a time, whole-GPU jobs take the next free GPUs of a pool
        cursor = {pool: 0 for pool, *_ in pools}
        slice_fill = {pool: 0 for pool, *_ in pools}
        placements = 0
        for n, t in enumerate(tenants):
            pool_order = [pools[(n + k) % 3][0] for k in range(3)]
            specs = [
                ("codespace", "development", 1, 250, 20480, pool_order[k % 3]) for k in range(12)
            ]
            specs += [
                (
                    "job_pod",
                    "training" if k % 2 else "inference",
                    1 + k % 2,
                    1000,
                    0,
                    pool_order[k % 3],
                )
                for k in range(6)
            ]
            for k, (kind, profile, count, milli, mem, pool) in enumerate(specs):
                quota = quotas[(t.pk, pool)]
                w = Workload.objects.create(
                    tenant=t,
                    quota=quota,
                    kind=kind,
                    name=f"{kind[:2]}-{t.slug}-{k}",
                    cpu_milli=4000,
                    memory_mib=16384,
                    gpu_count=count,
                    gpu_milli=milli,
                    gpu_memory_mib=mem,
                    profile=profile,
                    state="running",
                )
                Workload.objects.filter(pk=w.pk).update(
                    submitted_at=now - timedelta(minutes=30 + k),
                    placed_at=now - timedelta(minutes=k),
                )
                if milli < 1000:
                    gpu = gpus[pool][cursor[pool]]
                    held = [gpu]
                    slice_fill[pool] += 1
                    if slice_fill[pool] == 4:
                        slice_fill[pool] = 0
                        cursor[pool] += 1
                else:
                    if slice_fill[pool]:
                        slice_fill[pool] = 0
                        cursor[pool] += 1
                    held = gpus[pool][cursor[pool] : cursor[pool] + count]
                    if len({g.node_id for g in held}) > 1:
                        cursor[pool] = (cursor[pool] // GPUS_PER_NODE + 1) * GPUS_PER_NODE
                        held = gpus[pool][cursor[pool] : cursor[pool] + count]
                    cursor[pool] += count
                p = Placement.objects.create(
                    workload=w,
                    node_id=held[0].node_id,
                    tenant=t,
                    cpu_milli=4000,
                    memory_mib=16384,
                    gpu_milli_total=milli * count,
                )
                PlacementGpu.objects.bulk_create(
                    [
                        PlacementGpu(placement=p, gpu=g, gpu_milli=milli, gpu_memory_mib=mem)
                        for g in held
                    ]
                )
                placements += 1
            if n < 40:
                Workload.objects.create(
                    tenant=t,
                    quota=quotas[(t.pk, pool_order[0])],
                    kind="job_pod",
                    name=f"pending-{t.slug}",
                    cpu_milli=4000,
                    memory_mib=16384,
                    gpu_count=8,
                    gpu_milli=1000,
                    profile="training",
                )
    return {
        "nodes": sum(len(v) for v in nodes.values()),
        "tenants": tenant_count,
        "placements": placements,
    }


MINUTE_SQL = [
    # workloads: every active GPU workload, every minute of the last 24 h
    """
    INSERT INTO telemetry_workloadsample
        (ts, workload_id, tenant_id, quota_id, kind, allocated_milli, sm_utilization, used_milli,
         memory_used_mib, source, attribution)
    SELECT m, w.id, w.tenant_id, w.quota_id, w.kind, p.gpu_milli_total, u, p.gpu_milli_total * u / 100,
           1000, 'simulated', 'simulated'
    FROM scheduling_workload w
    JOIN scheduling_placement p ON p.workload_id = w.id AND p.released_at IS NULL
    CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz, interval '1 minute') m
    CROSS JOIN LATERAL (SELECT CASE WHEN w.kind = 'codespace' AND random() < 0.7
                                    THEN random() * 4 ELSE 40 + random() * 55 END AS u) r
    """,
    # quotas: the quota-figure row and one model row per quota and minute
    """
    INSERT INTO telemetry_quotasample
        (resolution, ts, minutes, group_id, quota_id, tenant_id, gpu_model, allocated_milli, used_milli,
         idle_milli, min_milli, max_milli, runtime_milli, borrowed_milli, pending)
    SELECT 'minute', m, 1, q.group_id, q.id, q.tenant_id, '', 0, 0, 0, q.gpu_min_gpu_milli,
           q.gpu_max_gpu_milli, q.gpu_min_gpu_milli, 0, floor(random() * 2)
    FROM quotas_quota q
    CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz, interval '1 minute') m
    """,
    """
    INSERT INTO telemetry_quotasample
        (resolution, ts, minutes, group_id, quota_id, tenant_id, gpu_model, allocated_milli, used_milli,
         idle_milli, min_milli, max_milli, runtime_milli, borrowed_milli, pending)
    SELECT 'minute', s.ts, 1, q.group_id, q.id, q.tenant_id, n.gpu_model, sum(s.allocated_milli),
           sum(s.used_milli), sum(CASE WHEN s.sm_utilization < 5 THEN s.allocated_milli ELSE 0 END),
           0, 0, 0, 0, 0
    FROM telemetry_workloadsample s
    JOIN quotas_quota q ON q.id = s.quota_id
    JOIN scheduling_placement p ON p.workload_id = s.workload_id AND p.released_at IS NULL
    JOIN scheduling_node n ON n.id = p.node_id
    GROUP BY s.ts, q.group_id, q.id, q.tenant_id, n.gpu_model
    """,
    # pools
    """
    INSERT INTO telemetry_poolsample
        (resolution, ts, minutes, group_id, capacity_gpus, capacity_milli, allocated_gpus,
         allocated_milli, sm_utilization, pending, codespace_cards_unsliced, codespace_cards_occupied,
         wait_p50_seconds, wait_p95_seconds, placed_count, cycle_ms)
    SELECT 'minute', m, 1, g.id, c.gpus, c.gpus * 1000, c.used_gpus, c.milli, 30 + random() * 40,
           random() * 5, c.slices, c.slices / 4.0, 30 + random() * 60, 200 + random() * 400, 3,
           5 + random() * 50
    FROM quotas_quotagroup g
    JOIN (SELECT n.pool, count(DISTINCT gp.id) AS gpus, count(DISTINCT pg.gpu_id) AS used_gpus,
                 coalesce(sum(pg.gpu_milli), 0) AS milli,
                 count(pg.id) FILTER (WHERE pg.gpu_milli < 1000) AS slices
          FROM scheduling_node n
          JOIN scheduling_gpu gp ON gp.node_id = n.id
          LEFT JOIN scheduling_placementgpu pg ON pg.gpu_id = gp.id
          GROUP BY n.pool) c ON c.pool = g.name
    CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz, interval '1 minute') m
    """,
]


def fill_minutes() -> dict[str, int]:
    from django.db import connection
    from django.utils import timezone

    from scheduling.telemetry.models import PoolSample, QuotaSample, WorkloadSample

    end = timezone.now().replace(second=0, microsecond=0)
    start = end - timedelta(hours=24) + timedelta(minutes=1)
    # replaces whatever minute rows exist (a re-run with --keep refreshes them up to now)
    WorkloadSample.objects.all().delete()
    QuotaSample.objects.filter(resolution="minute").delete()
    PoolSample.objects.filter(resolution="minute").delete()
    with connection.cursor() as cursor:
        for sql in MINUTE_SQL:
            cursor.execute(sql, {"start": start, "end": end})
        cursor.execute("ANALYZE")
    return {
        "workload_minute_rows": WorkloadSample.objects.count(),
        "quota_minute_rows": QuotaSample.objects.filter(resolution="minute").count(),
    }


def measure(client: Any, url: str, n: int, *, cold: bool) -> list[float]:
    """Latencies (ms) of `n` requests after a warm-up; `cold` empties the payload cache before each
    request (every request computes its figures), otherwise viewers share the cached payload."""
    from django.core.cache import cache

    response = client.get(url)
    if response.status_code != 200:
        raise SystemExit(f"{url}: HTTP {response.status_code}: {response.content[:300]!r}")
    times = []
    for _ in range(n):
        if cold:
            cache.clear()
        t = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - t) * 1000)
        assert response.status_code == 200, url
    return times


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/tessera_bench_dash"
    )
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="reuse the seeded database if present")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny size (3 tenants, 12 nodes, 2 days, 2 requests); reports the target, never fails on it",
    )
    args = parser.parse_args()
    if args.smoke:
        args.requests = min(args.requests, 2)

    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("TESSERA_VAR_DIR", "/tmp/tessera-bench-dash")
    os.environ["DEBUG"] = "false"
    sys.path.insert(0, str(ROOT))
    if not args.keep:
        recreate_database(args.database_url)

    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.test import Client

    from scheduling.models import Workload
    from scheduling.telemetry.backfill import backfill

    settings.ALLOWED_HOSTS = ["*"]
    seeded: dict[str, Any] = {}
    if not args.keep or not Workload.objects.exists():
        t = time.perf_counter()
        call_command("migrate", verbosity=0)
        seeded.update(seed(SMOKE_POOLS, SMOKE_TENANTS) if args.smoke else seed())
        report = backfill(SMOKE_HISTORY_DAYS if args.smoke else HISTORY_DAYS, raw_hours=0)
        seeded.update(
            {"hour_workload_rows": report.workload_hour_rows, "hour_quota_rows": report.quota_rows}
        )
        seeded["seed_seconds"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    seeded.update(fill_minutes())
    seeded["minute_fill_seconds"] = round(time.perf_counter() - t, 1)
    print("seeded:", json.dumps(seeded))

    from quotas.models import QuotaGroup
    from scheduling.models import Shard

    for group in QuotaGroup.objects.all():  # a database seeded before shards existed (--keep)
        Shard.objects.get_or_create(group=group, defaults={"version": 1, "last_cycle_ms": 25.0})
    client = Client()
    assert client.login(username="ops", password="bench")
    scenarios = {"baseline (tokens page)": "/account/tokens/", "home page": "/"}
    team = "team-01" if args.smoke else "team-07"
    pages = {
        "overview": ("/dashboards/", "/dashboards/data/?range={r}"),
        "tenant": (
            f"/dashboards/tenants/?tenant={team}",
            f"/dashboards/tenants/data/?tenant={team}&range={{r}}",
        ),
        "fragmentation": (
            "/dashboards/fragmentation/?pool=a100",
            "/dashboards/fragmentation/data/?pool=a100&preset=quarter",
        ),
        "savings": ("/dashboards/savings/", "/dashboards/savings/data/?range={r}"),
        "chargeback": ("/dashboards/chargeback/", "/dashboards/chargeback/data/?months=3"),
    }
    data_keys = []
    for name, (page, data) in pages.items():
        scenarios[f"{name} page"] = page
        for r in ("24h", "30d"):
            key = f"{name} data" + (f" {r}" if "{r}" in data else "")
            if key not in scenarios:
                scenarios[key] = data.format(r=r)
                data_keys.append(key)
    results: dict[str, dict[str, Any]] = {}
    for key, url in scenarios.items():
        cold = measure(client, url, args.requests, cold=True)
        warm = measure(client, url, args.requests, cold=False)
        results[key] = {
            "url": url,
            "cold_p50_ms": round(statistics.median(cold), 1),
            "cold_p95_ms": round(p95(cold), 1),
            "warm_p95_ms": round(p95(warm), 1),
        }
    base = results["baseline (tokens page)"]["cold_p95_ms"]
    print(f"{'scenario':30} {'cold p50':>9} {'cold p95':>9} {'× base':>7} {'warm p95':>9}  (ms)")
    for key, row in results.items():
        row["ratio_cold_p95"] = round(row["cold_p95_ms"] / base, 1) if base else None
        print(
            f"{key:30} {row['cold_p50_ms']:9.1f} {row['cold_p95_ms']:9.1f} "
            f"{row['ratio_cold_p95']:7.1f} {row['warm_p95_ms']:9.1f}"
        )
    failing = [
        k
        for k in data_keys + [k for k in results if k.endswith(" page")]
        if results[k]["cold_p95_ms"] > TARGET_MS
    ]
    print(
        f"target: every page and data endpoint cold p95 <= {TARGET_MS:.0f} ms:",
        "met" if not failing else f"MISSED by {failing}",
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"seeded": seeded, "results": results}, indent=2))
    return 1 if failing and not args.smoke else 0


if __name__ == "__main__":
    raise SystemExit(main())
