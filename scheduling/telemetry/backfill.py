"""Synthetic history for demos and benchmarks: hourly rollups for the past days, minute rows for the last
hours, derived from the cluster as it is now.

Minute rows are written in bulk (`backfill_minutes`): the cluster, quota figures and waits are read
once, each minute's rows are built by the same code as `ingest_minute` (`build_minute_rows`) from the
synthetic metrics of the workloads that held their placement in that hour, and each table gets one
bulk insert per hour; then each hour is rolled up from its minutes (the dashboards' minute and hour
views read the same samples). A day of minutes costs about what a few single-minute ingestions do.

Every GPU workload that holds a placement now is assumed to have held it in the past according to its
profile — inference always, training in 6-hour blocks (70 % of them), development (codespaces) in working
hours on weekdays and on 15 % of other hours — with utilization from `synthetic` (three samples an hour,
one per 20-minute burst window). Quota min / max / runtime come from the current quota snapshot; waits
are synthetic (p50 0.5–2 min, p95 3–10× that) and marked as such nowhere else: this is demo data, never
run it against a real cluster's history (it refuses when hour rows already exist in the range unless
`replace=True`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone

from core.units import MILLI_MINUTES_PER_GPU_HOUR, MILLI_PER_GPU
from portal.periodic import ItemFailures
from quotas.models import Quota, QuotaGroup
from scheduling.choices import WorkloadKind
from scheduling.models import Gpu, Node
from scheduling.telemetry import synthetic
from scheduling.telemetry.ingestion import (
    SyntheticMetrics,
    active_shares,
    build_minute_rows,
    floor_hour,
    floor_minute,
    node_in_group,
    quota_figures,
    read_minute_inputs,
)
from scheduling.telemetry.models import (
    GpuSample,
    PoolSample,
    QuotaSample,
    Resolution,
    WorkloadHourly,
    WorkloadSample,
)
from scheduling.telemetry.rollups import rollup_hour
from scheduling.telemetry.sample_rows import (
    PoolWaits,
    QuotaIds,
    Window,
    pool_row,
    quota_figures_row,
    quota_usage_row,
)

SAMPLE_MINUTES = (10, 30, 50)


def _held(workload_id: int, profile: str, hour: datetime) -> bool:
    """Whether a workload held its placement in `hour` in the synthetic history."""
    if profile == "inference":
        return True
    if profile == "training":
        block = int(hour.timestamp()) // (6 * 3600)
        return synthetic.unit_draw("train", workload_id, block) < 0.7
    working = hour.weekday() < 5 and 8 <= hour.hour < 20
    return working or synthetic.unit_draw("dev", workload_id, int(hour.timestamp()) // 3600) < 0.15


@dataclass
class BackfillReport:
    """What a backfill wrote."""

    hours: int
    workload_hour_rows: int
    quota_rows: int
    pool_rows: int
    minutes: int


class BackfillRefused(Exception):
    """Hour rows already exist in the range (pass replace=True to overwrite them)."""


def backfill(
    days: int = 30, *, raw_hours: int = 2, now: datetime | None = None, replace: bool = False
) -> BackfillReport:
    """Write `days` of hourly rollups ending `raw_hours` before `now`, then minute rows for the last
    `raw_hours` (`backfill_minutes`) and their rollups."""
    now = now or timezone.now()
    raw_start = floor_hour(now - timedelta(hours=raw_hours))
    first = raw_start - timedelta(days=days)
    hours = [
        first + timedelta(hours=h) for h in range(int((raw_start - first).total_seconds() // 3600))
    ]
    existing = WorkloadHourly.objects.filter(hour__gte=first, hour__lt=raw_start).exists() or (
        QuotaSample.objects.filter(
            resolution=Resolution.HOUR, ts__gte=first, ts__lt=raw_start
        ).exists()
    )
    if existing and not replace:
        raise BackfillRefused(
            f"hour rows already exist between {first:%Y-%m-%d %H:00} and {raw_start:%Y-%m-%d %H:00}"
        )

    shares = active_shares()
    quotas = {q.pk: q for q in Quota.objects.all()}
    groups = list(QuotaGroup.objects.all())
    nodes = list(Node.objects.all())
    node_group: dict[int, int] = {}
    for node in nodes:
        for group in groups:
            if node_in_group(node, group):
                node_group.setdefault(node.pk, group.pk)
    healthy_by_group: dict[int, int] = defaultdict(int)
    for gpu in Gpu.objects.select_related("node"):
        if gpu.healthy and gpu.node.healthy and gpu.node_id in node_group:
            healthy_by_group[node_group[gpu.node_id]] += 1
    figures: dict[int, tuple[float, float, float, float]] = {}
    for group in groups:
        figures.update(quota_figures(group))

    # per workload: its shares (gpu id, milli, node) and identity
    per_workload: dict[int, list[tuple[int, int, Node]]] = defaultdict(list)
    identity: dict[int, tuple[int, int, str, str]] = {}
    for share, workload, node in shares:
        per_workload[workload.pk].append((share.gpu_id, share.gpu_milli, node))
        identity[workload.pk] = (
            workload.tenant_id,
            workload.quota_id,
            workload.kind,
            workload.profile,
        )

    workload_rows: list[WorkloadHourly] = []
    quota_rows: list[QuotaSample] = []
    pool_rows: list[PoolSample] = []
    written = [0, 0, 0]

    def flush() -> None:
        # a day at a time, so 30 days of a large cluster never sit in memory at once
        WorkloadHourly.objects.bulk_create(workload_rows, batch_size=5000)
        QuotaSample.objects.bulk_create(quota_rows, batch_size=5000)
        PoolSample.objects.bulk_create(pool_rows, batch_size=5000)
        written[0] += len(workload_rows)
        written[1] += len(quota_rows)
        written[2] += len(pool_rows)
        workload_rows.clear()
        quota_rows.clear()
        pool_rows.clear()

    with transaction.atomic():
        if replace:
            WorkloadHourly.objects.filter(hour__gte=first, hour__lt=raw_start).delete()
            QuotaSample.objects.filter(
                resolution=Resolution.HOUR, ts__gte=first, ts__lt=raw_start
            ).delete()
            PoolSample.objects.filter(
                resolution=Resolution.HOUR, ts__gte=first, ts__lt=raw_start
            ).delete()
        for number, hour in enumerate(hours, start=1):
            _backfill_hour(
                hour,
                per_workload,
                identity,
                quotas,
                groups,
                node_group,
                healthy_by_group,
                figures,
                workload_rows,
                quota_rows,
                pool_rows,
            )
            if number % 24 == 0:
                flush()
        flush()

    minutes = backfill_minutes(raw_start, now).minutes
    return BackfillReport(
        hours=len(hours),
        workload_hour_rows=written[0],
        quota_rows=written[1],
        pool_rows=written[2],
        minutes=minutes,
    )


def _backfill_hour(
    hour: datetime,
    per_workload: dict[int, list[tuple[int, int, Node]]],
    identity: dict[int, tuple[int, int, str, str]],
    quotas: dict[int, Quota],
    groups: list[QuotaGroup],
    node_group: dict[int, int],
    healthy_by_group: dict[int, int],
    figures: dict[int, tuple[float, float, float, float]],
    workload_rows: list[WorkloadHourly],
    quota_rows: list[QuotaSample],
    pool_rows: list[PoolSample],
) -> None:
    """Append the synthetic rows of one hour (see the module docstring)."""
    window = Window.hour(hour)

    quota_alloc: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    pool_alloc: dict[int, dict[str, object]] = defaultdict(
        lambda: {"milli": 0.0, "gpus": set(), "util": 0.0, "unsliced": 0, "occupied": set()}
    )
    for workload_id, held in per_workload.items():
        tenant_id, quota_id, kind, profile = identity[workload_id]
        if not _held(workload_id, profile, hour):
            continue
        milli = sum(m for _g, m, _n in held)
        utils = [
            synthetic.utilization(workload_id, profile, hour + timedelta(minutes=m))
            for m in SAMPLE_MINUTES
        ]
        allocated_mm = milli * 60.0
        used_mm = sum(milli * u / 100 * 20 for u in utils)
        idle_mm = sum(milli * 20.0 for u in utils if synthetic.is_idle(u))
        workload_rows.append(
            WorkloadHourly(
                hour=hour,
                workload_id=workload_id,
                tenant_id=tenant_id,
                quota_id=quota_id,
                kind=kind,
                minutes=60,
                allocated_milli_minutes=allocated_mm,
                used_milli_minutes=round(used_mm, 3),
                idle_milli_minutes=idle_mm,
            )
        )
        model = held[0][2].gpu_model or "unknown"
        acc = quota_alloc[(quota_id, model)]
        acc[0] += allocated_mm
        acc[1] += used_mm
        acc[2] += idle_mm
        mean_util = sum(utils) / len(utils)
        for gpu_id, share_milli, node in held:
            group_id = node_group.get(node.pk)
            if group_id is None:
                continue
            pool = pool_alloc[group_id]
            pool["milli"] = float(pool["milli"]) + share_milli  # type: ignore[arg-type]
            pool["gpus"].add(gpu_id)  # type: ignore[attr-defined]
            pool["util"] = float(pool["util"]) + mean_util * share_milli / MILLI_PER_GPU  # type: ignore[arg-type]
            if kind == WorkloadKind.CODESPACE and share_milli < MILLI_PER_GPU:
                pool["unsliced"] = int(pool["unsliced"]) + 1  # type: ignore[call-overload]
                pool["occupied"].add(gpu_id)  # type: ignore[attr-defined]
    allocated_by_quota: dict[int, float] = defaultdict(float)
    for (quota_id, model), (alloc, used, idle) in quota_alloc.items():
        quota = quotas[quota_id]
        allocated_by_quota[quota_id] += alloc
        quota_rows.append(
            quota_usage_row(
                window,
                QuotaIds.of(quota),
                model,
                allocated_milli=alloc,
                used_milli=round(used, 3),
                idle_milli=idle,
            )
        )
    for quota in quotas.values():
        minimum, maximum, runtime, _borrowed = figures.get(quota.pk, (0.0, 0.0, 0.0, 0.0))
        borrowed = max(0.0, allocated_by_quota.get(quota.pk, 0.0) / 60 - minimum)
        quota_rows.append(
            quota_figures_row(
                window,
                QuotaIds.of(quota),
                {
                    "min_milli": minimum * 60,
                    "max_milli": maximum * 60,
                    "runtime_milli": runtime * 60,
                    "borrowed_milli": borrowed * 60,
                    "pending": round(
                        2 * synthetic.unit_draw("pending", quota.pk, hour.timestamp()), 1
                    )
                    * 60,
                },
            )
        )
    for group in groups:
        capacity = healthy_by_group.get(group.pk, 0)
        pool = pool_alloc[group.pk]
        p50 = 30 + 90 * synthetic.unit_draw("p50", group.pk, hour.timestamp())
        p95 = p50 * (3 + 7 * synthetic.unit_draw("p95", group.pk, hour.timestamp()))
        pool_rows.append(
            pool_row(
                window,
                group.pk,
                {
                    "capacity_gpus": capacity * 60,
                    "capacity_milli": capacity * MILLI_MINUTES_PER_GPU_HOUR,
                    "allocated_gpus": len(pool["gpus"]) * 60,  # type: ignore[arg-type]
                    "allocated_milli": float(pool["milli"]) * 60,  # type: ignore[arg-type]
                    "sm_utilization": (float(pool["util"]) / capacity * 60) if capacity else 0.0,  # type: ignore[arg-type]
                    "pending": sum(
                        round(2 * synthetic.unit_draw("pending", q.pk, hour.timestamp()), 1) * 60
                        for q in quotas.values()
                        if q.group_id == group.pk
                    ),
                    "codespace_cards_unsliced": int(pool["unsliced"]) * 60,  # type: ignore[call-overload]
                    "codespace_cards_occupied": len(pool["occupied"]) * 60,  # type: ignore[arg-type]
                },
                PoolWaits(round(p50, 1), round(p95, 1), 0),
            )
        )


def _insert_rows(rows: list[Model]) -> int:
    """Insert new rows of one model with one executemany: the column values as the instances hold
    them, datetimes adapted by the backend (the ORM's bulk_create spends most of a day's backfill
    preparing 200 000 rows field by field; these models hold only ints, floats, strings, datetimes)."""
    if not rows:
        return 0
    meta = rows[0]._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    ops = connection.ops
    sql = "INSERT INTO {} ({}) VALUES ({})".format(
        ops.quote_name(meta.db_table),
        ", ".join(ops.quote_name(f.column) for f in fields),
        ", ".join(["%s"] * len(fields)),
    )
    adapted: dict[datetime, Any] = {}

    def value(row: Model, name: str) -> Any:
        raw = getattr(row, name)
        if isinstance(raw, datetime):
            if raw not in adapted:
                adapted[raw] = ops.adapt_datetimefield_value(raw)
            return adapted[raw]
        return raw

    names = [f.attname for f in fields]
    with connection.cursor() as cursor:
        cursor.executemany(sql, [[value(row, n) for n in names] for row in rows])
    return len(rows)


@dataclass
class MinuteBackfillReport:
    """What a minute backfill wrote."""

    minutes: int
    hours: int
    workload_rows: int
    gpu_rows: int
    quota_rows: int
    pool_rows: int


def backfill_minutes(start: datetime, now: datetime | None = None) -> MinuteBackfillReport:
    """Write synthetic minute rows for every minute from `start` to `now` (both included), replacing
    any in that range, and roll each hour up from them. Workloads placed now count in an hour of the
    past when their profile held it then (`_held`: the hourly history's rule, so minutes and hours
    agree); in the current hour all of them do. One transaction; one bulk insert per table per hour."""
    now = now or timezone.now()
    first = floor_minute(start)
    end = floor_minute(now)
    failures = ItemFailures()
    inputs = read_minute_inputs(end, failures)
    source = SyntheticMetrics()
    current_hour = floor_hour(end)
    counts = [0, 0, 0, 0]
    minutes = hours = 0
    with transaction.atomic():
        WorkloadSample.objects.filter(ts__gte=first, ts__lte=end).delete()
        GpuSample.objects.filter(ts__gte=first, ts__lte=end).delete()
        QuotaSample.objects.filter(
            resolution=Resolution.MINUTE, ts__gte=first, ts__lte=end
        ).delete()
        PoolSample.objects.filter(resolution=Resolution.MINUTE, ts__gte=first, ts__lte=end).delete()
        hour = floor_hour(first)
        while hour <= end:
            held = [
                entry
                for entry in inputs.shares_full
                if hour == current_hour or _held(entry[1].pk, entry[1].profile, hour)
            ]
            in_hour = dataclasses.replace(inputs, shares_full=held)
            shares = [share for share, _w, _n in held]
            tables: list[list[Any]] = [[], [], [], []]
            minute = max(hour, first)
            while minute < hour + timedelta(hours=1) and minute <= end:
                metrics = source.measure(minute, shares, inputs.gpus)
                rows = build_minute_rows(minute, in_hour, metrics, str(source.source))
                tables[0].extend(rows.workloads)
                tables[1].extend(rows.gpus)
                tables[2].extend(rows.quotas)
                tables[3].extend(rows.pools)
                minutes += 1
                minute += timedelta(minutes=1)
            for number, table in enumerate(tables):
                counts[number] += _insert_rows(table)
            rollup_hour(hour)
            hours += 1
            hour += timedelta(hours=1)
    return MinuteBackfillReport(
        minutes=minutes,
        hours=hours,
        workload_rows=counts[0],
        gpu_rows=counts[1],
        quota_rows=counts[2],
        pool_rows=counts[3],
    )
