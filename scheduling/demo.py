"""Demo data of the scheduling app: the simulated cluster's inventory and a month of recorded demand
(idempotent).

Loads `TESSERA_SIM_INVENTORY` ("demo" = the bundled 24-node cluster: pool `training` with H100/A100 nodes,
pool `interactive` with L40S/T4 nodes, each with CPU-only nodes) into Node/Gpu rows. Quota groups select
the pools with `{"pool": "training"}` / `{"pool": "interactive"}` (quotas.demo).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import TextIO

from django.conf import settings
from django.utils import timezone

from quotas.models import Quota
from scheduling.choices import WorkloadKind, WorkloadState
from scheduling.inventory import load_configured_inventory, sync_inventory_rows
from scheduling.models import Gpu, Node, Workload


def seed(stdout: TextIO) -> None:
    if settings.TESSERA_BACKEND != "simulated":
        stdout.write(
            "Cluster: TESSERA_BACKEND is not simulated; nodes come from the cluster's sync.\n"
        )
        return
    inventory = load_configured_inventory(settings.TESSERA_SIM_INVENTORY)
    report = sync_inventory_rows(inventory)
    pools: dict[str, int] = {}
    for node in Node.objects.all():
        pools[node.pool or "-"] = pools.get(node.pool or "-", 0) + 1
    stdout.write(
        f"Simulated cluster ({settings.TESSERA_SIM_INVENTORY}): {Node.objects.count()} nodes, "
        f"{Gpu.objects.count()} GPUs ({report.created_nodes} nodes added); pools: "
        + ", ".join(f"{p}={n}" for p, n in sorted(pools.items()))
        + "\n"
    )


# ------------------------------------------------------------------------------ recorded demand
# A month of finished work per pool, so the what-if planner (scheduling.services.whatif replays the
# Workload rows submitted in its window) has demand to replay on `make run`'s demo: training jobs of
# 1-8 whole GPUs for hours, and interactive sessions (slices of an L40S, whole T4s) in working hours.
HISTORY_PREFIX = "history-"
HISTORY_DAYS = 30
HISTORY_SEED = 20261207
# pool -> (jobs per day, [(weight, gpu count, milli per GPU, GPU memory MiB per GPU, models)],
#          (shortest, longest) run in hours, working hours only)
HISTORY_SHAPES: dict[
    str, tuple[int, list[tuple[int, int, int, int, list[str]]], tuple[float, float], bool]
] = {
    "training": (
        40,
        [(30, 1, 1000, 0, []), (30, 2, 1000, 0, []), (25, 4, 1000, 0, []), (15, 8, 1000, 0, [])],
        (2.0, 12.0),
        False,
    ),
    "interactive": (
        100,
        [
            (30, 1, 250, 11264, ["L40S"]),
            (25, 1, 500, 22528, ["L40S"]),
            (25, 1, 1000, 0, ["L40S"]),
            (20, 1, 1000, 0, ["T4"]),
        ],
        (2.0, 10.0),
        True,
    ),
}


def seed_demand_history(stdout: TextIO, now: datetime | None = None) -> None:
    """Record `HISTORY_DAYS` of finished demand in every demo pool, spread over each pool's quotas
    (deterministic; written only when no history row exists, so a second seed adds nothing)."""
    if Workload.objects.filter(name__startswith=HISTORY_PREFIX).exists():
        stdout.write("Demand history: already recorded\n")
        return
    now = now or timezone.now()
    rng = random.Random(HISTORY_SEED)
    rows: list[Workload] = []
    for pool, (per_day, shapes, (shortest, longest), working_hours) in HISTORY_SHAPES.items():
        quotas = list(
            Quota.objects.filter(group__name=pool).select_related("tenant").order_by("pk")
        )
        if not quotas:
            continue
        weights = [shape[0] for shape in shapes]
        start = now - timedelta(days=HISTORY_DAYS)
        for day in range(HISTORY_DAYS):
            weekday = (start + timedelta(days=day)).weekday() < 5
            for k in range(per_day if weekday else per_day // 3):
                hour = rng.uniform(8, 19) if working_hours else rng.uniform(0, 24)
                submitted = start + timedelta(days=day, hours=hour)
                _weight, count, milli, memory, models = rng.choices(shapes, weights)[0]
                run = timedelta(hours=rng.uniform(shortest, longest))
                wait = timedelta(seconds=rng.expovariate(1 / 120))
                if submitted + wait + run > now:
                    continue  # history is what finished; what runs now is the demo's live work
                quota = quotas[rng.randrange(len(quotas))]
                rows.append(
                    Workload(
                        tenant=quota.tenant,
                        quota=quota,
                        kind=WorkloadKind.JOB_POD,
                        name=f"{HISTORY_PREFIX}{pool}-{day:02d}-{k:03d}",
                        cpu_milli=4000 * count,
                        memory_mib=16384 * count,
                        gpu_count=count,
                        gpu_milli=milli,
                        gpu_memory_mib=memory,
                        gpu_models=models,
                        profile="training" if pool == "training" else "development",
                        state=WorkloadState.SUCCEEDED,
                        submitted_at=submitted,
                        placed_at=submitted + wait,
                        started_at=submitted + wait,
                        finished_at=submitted + wait + run,
                    )
                )
    submitted_times = [row.submitted_at for row in rows]
    created = Workload.objects.bulk_create(rows, batch_size=500)
    # submitted_at is auto_now_add: bulk_create stamped it now; put the recorded times back
    for row, submitted in zip(created, submitted_times, strict=True):
        row.submitted_at = submitted
    Workload.objects.bulk_update(created, ["submitted_at"], batch_size=500)
    stdout.write(f"Demand history: {len(created)} finished requests over {HISTORY_DAYS} days\n")
