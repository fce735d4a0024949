"""Dashboard and usage-API data: plain time series and tables computed from the samples.

Every function returns plain data (dataclasses, lists of tuples) that `portal.charts` turns into figures
and the API serializes. Ranges up to 48 hours read minute rows, longer ones hour rows.

Definitions (also written on each page):

* **GPU allocation** = allocated GPU capacity / schedulable GPU capacity (unhealthy GPUs excluded), both in
  cards (cards holding any share / healthy cards) and in compute milli (allocated milli / healthy × 1000).
* **Utilization** = mean SM utilization (of the pool's healthy cards; of a tenant's allocation).
* **Idle allocated GPU-hours** = allocation held during minutes whose SM utilization was below 5 %.
* **Fragmentation** = free GPU capacity that the current request mix cannot use (FGD's expected
  fragmentation over the typical pods of active and pending requests).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import TruncMonth

from core.units import MILLI_MINUTES_PER_GPU_HOUR, MILLI_PER_GPU
from portal.errors import InvalidInput
from portal.models import Tenant
from quotas.models import Quota, QuotaGroup
from scheduling.telemetry.models import (
    PoolSample,
    QuotaSample,
    Resolution,
    WorkloadHourly,
    WorkloadSample,
)
from scheduling.telemetry.samples import percentile, wait_seconds

RANGES: dict[str, timedelta] = {
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "48h": timedelta(hours=48),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "90d": timedelta(days=90),
}
DEFAULT_RANGE = "24h"
RAW_LIMIT = timedelta(hours=48)
BUCKET_ABOVE = timedelta(hours=6)


@dataclass(frozen=True)
class Window:
    """A time range and the resolution it is read at."""

    start: datetime
    end: datetime
    resolution: str

    @property
    def step(self) -> timedelta:
        return timedelta(minutes=1) if self.resolution == Resolution.MINUTE else timedelta(hours=1)

    @property
    def bucket_minutes(self) -> int:
        """Minute rows are charted per minute up to 6 hours and per 5 minutes beyond (288 points a
        day is finer than a chart's pixels); hour rows per hour."""
        if self.resolution == Resolution.MINUTE and self.end - self.start > BUCKET_ABOVE:
            return 5
        return 1

    def bucket(self, ts: datetime) -> datetime:
        """The start of the chart period holding `ts`."""
        k = self.bucket_minutes
        return ts if k == 1 else ts.replace(minute=ts.minute - ts.minute % k)


def window(range_key: str | None, now: datetime) -> Window:
    """The window for a range key ("6h" … "90d") ending at `now`; InvalidInput for an unknown key."""
    key = range_key or DEFAULT_RANGE
    if key not in RANGES:
        raise InvalidInput(
            f"Unknown range {key!r}: choose one of {', '.join(RANGES)}.",
            fields={"range": [f"choose one of {', '.join(RANGES)}"]},
        )
    span = RANGES[key]
    resolution = Resolution.MINUTE if span <= RAW_LIMIT else Resolution.HOUR
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if resolution == Resolution.HOUR:
        end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    return Window(start=end - span, end=end, resolution=resolution)


def _ratio(numerator: float, denominator: float, scale: float = 100.0) -> float | None:
    return round(numerator / denominator * scale, 2) if denominator else None


# --------------------------------------------------------------------------- cluster overview
@dataclass(frozen=True)
class PoolPoint:
    """One period of one pool (means over the period)."""

    ts: datetime
    allocation_cards_percent: float | None
    allocation_milli_percent: float | None
    utilization_percent: float | None
    allocated_gpus: float
    capacity_gpus: float
    pending: float
    wait_p50_seconds: float | None
    wait_p95_seconds: float | None


def pool_series(
    win: Window, groups: Iterable[QuotaGroup] | None = None
) -> dict[str, list[PoolPoint]]:
    """Per pool name, the points of the window (allocation %, utilization %, pending, waits)."""
    rows = PoolSample.objects.filter(resolution=win.resolution, ts__gte=win.start, ts__lt=win.end)
    if groups is not None:
        rows = rows.filter(group__in=list(groups))
    names = dict(QuotaGroup.objects.values_list("pk", "name"))
    buckets: dict[tuple[int, datetime], list[Any]] = {}
    fields = (
        "group_id",
        "ts",
        "minutes",
        "allocated_gpus",
        "capacity_gpus",
        "allocated_milli",
        "capacity_milli",
        "sm_utilization",
        "pending",
        "wait_p50_seconds",
        "wait_p95_seconds",
    )
    # plain tuples, not model instances: a 48-hour range of three pools is 8,640 rows
    for group_id, ts, n, a_gpus, c_gpus, a_milli, c_milli, sm, pending, p50, p95 in rows.order_by(
        "group_id", "ts"
    ).values_list(*fields):
        acc = buckets.get((group_id, win.bucket(ts)))
        if acc is None:
            buckets[(group_id, win.bucket(ts))] = [
                n,
                a_gpus,
                c_gpus,
                a_milli,
                c_milli,
                sm,
                pending,
                p50,
                p95,
            ]
            continue
        for i, value in enumerate((n, a_gpus, c_gpus, a_milli, c_milli, sm, pending)):
            acc[i] += value
        # waits are trailing-hour percentiles: the latest of the period stands for it
        if p50 is not None:
            acc[7], acc[8] = p50, p95
    out: dict[str, list[PoolPoint]] = defaultdict(list)
    for (group_id, ts), acc in buckets.items():
        n, a_gpus, c_gpus, a_milli, c_milli, sm, pending, p50, p95 = acc
        n = n or 1
        out[names[group_id]].append(
            PoolPoint(
                ts=ts,
                allocation_cards_percent=_ratio(a_gpus, c_gpus),
                allocation_milli_percent=_ratio(a_milli, c_milli),
                utilization_percent=round(sm / n, 2),
                allocated_gpus=round(a_gpus / n, 3),
                capacity_gpus=round(c_gpus / n, 3),
                pending=round(pending / n, 2),
                wait_p50_seconds=p50,
                wait_p95_seconds=p95,
            )
        )
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class ClusterSummary:
    """Headline figures over a window: allocation and utilization means, waits, fragmentation."""

    allocation_cards_percent: float | None
    allocation_milli_percent: float | None
    utilization_percent: float | None
    pending_now: float
    wait_p50_seconds: float | None
    wait_p95_seconds: float | None


def cluster_summary(win: Window) -> ClusterSummary:
    """Means over the window across pools; waits over the workloads placed in the window."""
    agg = PoolSample.objects.filter(
        resolution=win.resolution, ts__gte=win.start, ts__lt=win.end
    ).aggregate(
        alloc_gpus=Sum("allocated_gpus"),
        cap_gpus=Sum("capacity_gpus"),
        alloc_milli=Sum("allocated_milli"),
        cap_milli=Sum("capacity_milli"),
        # capacity-weighted mean of the per-row mean SM %: Σ(sm × cards / minutes) / Σ cards, because
        # both sm_utilization and capacity_gpus are sums over the row's minutes
        util=Sum(F("sm_utilization") * F("capacity_gpus") / F("minutes")),
        cap_weight=Sum("capacity_gpus"),
    )
    latest = (
        PoolSample.objects.filter(resolution=Resolution.MINUTE)
        .order_by("-ts")
        .values_list("ts", flat=True)
        .first()
    )
    pending_now = 0.0
    if latest is not None:
        pending_now = float(
            PoolSample.objects.filter(resolution=Resolution.MINUTE, ts=latest).aggregate(
                p=Sum("pending")
            )["p"]
            or 0
        )
    waits = wait_seconds(Quota.objects.values_list("pk", flat=True), win.start, win.end)
    return ClusterSummary(
        allocation_cards_percent=_ratio(agg["alloc_gpus"] or 0, agg["cap_gpus"] or 0),
        allocation_milli_percent=_ratio(agg["alloc_milli"] or 0, agg["cap_milli"] or 0),
        utilization_percent=_ratio(agg["util"] or 0, agg["cap_weight"] or 0, 1.0),
        pending_now=pending_now,
        wait_p50_seconds=percentile(waits, 50),
        wait_p95_seconds=percentile(waits, 95),
    )


# --------------------------------------------------------------------------- per tenant
@dataclass(frozen=True)
class TenantPoint:
    """One period of a tenant, across its quotas: mean GPUs (cards) allocated, used, idle, and its
    quotas' min / max / runtime share / borrowed; mean pending GPU workloads."""

    ts: datetime
    allocated: float
    used: float
    idle: float
    min: float
    max: float
    runtime: float
    borrowed: float
    pending: float

    @property
    def utilization_percent(self) -> float | None:
        return _ratio(self.used, self.allocated)


@dataclass(frozen=True)
class WastingCodespace:
    """A codespace ranked by idle allocated GPU-hours in the window."""

    workload_id: int
    name: str
    idle_gpu_hours: float
    allocated_gpu_hours: float
    utilization_percent: float | None


@dataclass
class TenantUsage:
    """Everything the per-tenant page shows."""

    tenant: Tenant
    points: list[TenantPoint] = field(default_factory=list)
    allocated_gpu_hours: float = 0.0
    used_gpu_hours: float = 0.0
    idle_gpu_hours: float = 0.0
    wasting: list[WastingCodespace] = field(default_factory=list)
    utilization_percent: float | None = None
    """Used ÷ allocated over the window (from the unrounded sums)."""
    elsewhere: WastingCodespace | None = None
    """The idle and allocated GPU-hours of every workload not in `wasting` (jobs, the codespaces past
    the top ones), from the same samples: `wasting` plus this add up to the tenant's totals."""


def _quota_points(rows: Iterable[dict[str, object]]) -> list[TenantPoint]:
    points = []
    for r in rows:
        # quota figures and allocations are sums over minutes (and over quotas of the period): the mean
        # over the period divides by the minutes of one quota row, which all rows of a period share.
        n = float(r["minutes"] or 1)  # type: ignore[arg-type]

        def cards(key: str, n: float = n, r: dict[str, object] = r) -> float:
            return round(float(r[key] or 0) / n / MILLI_PER_GPU, 3)  # type: ignore[arg-type]

        points.append(
            TenantPoint(
                ts=r["ts"],  # type: ignore[arg-type]
                allocated=cards("allocated"),
                used=cards("used"),
                idle=cards("idle"),
                min=cards("min"),
                max=cards("max"),
                runtime=cards("runtime"),
                borrowed=cards("borrowed"),
                pending=round(float(r["pending"] or 0) / n, 2),  # type: ignore[arg-type]
            )
        )
    return points


def _bucketed(rows: list[dict[str, Any]], win: Window) -> list[dict[str, Any]]:
    """Merge per-ts sums into chart periods (sums add up, minutes too)."""
    if win.bucket_minutes == 1:
        return rows
    merged: dict[datetime, dict[str, Any]] = {}
    for r in rows:
        key = win.bucket(r["ts"])
        acc = merged.get(key)
        if acc is None:
            merged[key] = {**r, "ts": key}
            continue
        for field_name, value in r.items():
            if field_name != "ts":
                acc[field_name] = (acc[field_name] or 0) + (value or 0)
    return list(merged.values())


def tenant_usage(
    tenant: Tenant, win: Window, *, quota: Quota | None = None, top: int = 10
) -> TenantUsage:
    """A tenant's (or one of its quotas') series over the window, GPU-hour totals and the codespaces
    that held the most idle GPU-hours."""
    rows = QuotaSample.objects.filter(
        resolution=win.resolution, tenant=tenant, ts__gte=win.start, ts__lt=win.end
    )
    if quota is not None:
        rows = rows.filter(quota=quota)
    # `minutes` of the quota-figure row ("" model) gives the period length; every quota has one per period
    per_ts = (
        rows.values("ts")
        .annotate(
            minutes=Sum("minutes", filter=Q(gpu_model="")),
            allocated=Sum("allocated_milli"),
            used=Sum("used_milli"),
            idle=Sum("idle_milli"),
            min=Sum("min_milli"),
            max=Sum("max_milli"),
            runtime=Sum("runtime_milli"),
            borrowed=Sum("borrowed_milli"),
            pending=Sum("pending"),
            quotas=Count("id", filter=Q(gpu_model="")),
        )
        .order_by("ts")
    )
    normalised = []
    totals = {"allocated": 0.0, "used": 0.0, "idle": 0.0}
    for r in per_ts:
        quotas = float(r.pop("quotas") or 1)
        r["minutes"] = float(r["minutes"] or quotas) / quotas
        for key in totals:
            totals[key] += float(r[key] or 0)
        normalised.append(r)
    usage = TenantUsage(tenant=tenant, points=_quota_points(_bucketed(normalised, win)))
    usage.allocated_gpu_hours = round(totals["allocated"] / MILLI_MINUTES_PER_GPU_HOUR, 3)
    usage.used_gpu_hours = round(totals["used"] / MILLI_MINUTES_PER_GPU_HOUR, 3)
    usage.idle_gpu_hours = round(totals["idle"] / MILLI_MINUTES_PER_GPU_HOUR, 3)
    usage.utilization_percent = _ratio(totals["used"], totals["allocated"])
    usage.wasting, usage.elsewhere = wasting_breakdown(tenant, win, quota=quota, top=top)
    return usage


def wasting_codespaces(
    tenant: Tenant, win: Window, *, quota: Quota | None = None, top: int = 10
) -> list[WastingCodespace]:
    """The tenant's codespaces with the most idle allocated GPU-hours in the window (ties by name)."""
    return wasting_breakdown(tenant, win, quota=quota, top=top)[0]


def wasting_breakdown(
    tenant: Tenant, win: Window, *, quota: Quota | None = None, top: int = 10
) -> tuple[list[WastingCodespace], WastingCodespace | None]:
    """The tenant's `top` codespaces by idle allocated GPU-hours in the window (ties by name), and
    every other workload of the tenant (jobs, the other codespaces) summed as one row (None when it
    held nothing).

    Read at the window's resolution, like the tenant's totals (`tenant_usage`), from the per-workload
    samples the totals are summed from, so the rows add up to the totals above them: minute samples
    for ranges read at minute resolution, hour rows (the current hour's row is re-rolled every minute,
    so it is fresh) for those read per hour."""
    rows: Any
    if win.resolution == Resolution.MINUTE:
        idle = Q(sm_utilization__isnull=True) | Q(sm_utilization__lt=5.0)
        qs = WorkloadSample.objects.filter(tenant=tenant, ts__gte=win.start, ts__lt=win.end)
        if quota is not None:
            qs = qs.filter(quota=quota)
        rows = qs.values("workload_id", "workload__name", "kind").annotate(
            idle=Sum("allocated_milli", filter=idle),
            allocated=Sum("allocated_milli"),
            used=Sum("used_milli"),
        )
    else:
        hourly = WorkloadHourly.objects.filter(
            tenant=tenant,
            hour__gte=win.start,
            hour__lt=win.end,
        )
        if quota is not None:
            hourly = hourly.filter(quota=quota)
        rows = hourly.values("workload_id", "workload__name", "kind").annotate(
            idle=Sum("idle_milli_minutes"),
            allocated=Sum("allocated_milli_minutes"),
            used=Sum("used_milli_minutes"),
        )
    sums = [
        (r["workload_id"], r["workload__name"], r["kind"])
        + (float(r["idle"] or 0), float(r["allocated"] or 0), float(r["used"] or 0))
        for r in rows
    ]
    codespaces = [row for row in sums if row[2] == "codespace" and row[3] > 0]
    codespaces.sort(key=lambda row: (-row[3], row[1], row[0]))
    listed = {row[0] for row in codespaces[:top]}
    rest = [row for row in sums if row[0] not in listed]

    def as_row(workload_id: int, name: str, idle: float, allocated: float, used: float) -> Any:
        return WastingCodespace(
            workload_id=workload_id,
            name=name,
            idle_gpu_hours=round(idle / MILLI_MINUTES_PER_GPU_HOUR, 3),
            allocated_gpu_hours=round(allocated / MILLI_MINUTES_PER_GPU_HOUR, 3),
            utilization_percent=_ratio(used, allocated),
        )

    ranked = [as_row(w, n, i, a, u) for w, n, _k, i, a, u in codespaces[:top]]
    elsewhere = None
    if rest:
        elsewhere = as_row(
            0,
            f"Everything else ({len(rest)} workload{'' if len(rest) == 1 else 's'})",
            sum(row[3] for row in rest),
            sum(row[4] for row in rest),
            sum(row[5] for row in rest),
        )
    return ranked, elsewhere


# --------------------------------------------------------------------------- codespace savings
@dataclass(frozen=True)
class SavingsPoint:
    """Whole cards the codespaces would hold without slicing vs the cards their slices occupy."""

    ts: datetime
    cards_unsliced: float
    cards_occupied: float

    @property
    def cards_saved(self) -> float:
        return round(self.cards_unsliced - self.cards_occupied, 3)


def savings_series(win: Window) -> list[SavingsPoint]:
    """Across pools, per period (means over the period)."""
    rows = (
        PoolSample.objects.filter(resolution=win.resolution, ts__gte=win.start, ts__lt=win.end)
        .values("ts")
        .annotate(
            unsliced=Sum(F("codespace_cards_unsliced") / F("minutes")),
            occupied=Sum(F("codespace_cards_occupied") / F("minutes")),
        )
        .order_by("ts")
    )
    merged: dict[datetime, list[float]] = {}
    for r in rows:
        acc = merged.setdefault(win.bucket(r["ts"]), [0.0, 0.0, 0])
        acc[0] += float(r["unsliced"] or 0)
        acc[1] += float(r["occupied"] or 0)
        acc[2] += 1
    return [
        SavingsPoint(
            ts=ts,
            cards_unsliced=round(unsliced / count, 3),
            cards_occupied=round(occupied / count, 3),
        )
        for ts, (unsliced, occupied, count) in merged.items()
    ]


# --------------------------------------------------------------------------- chargeback
def gpu_hour_prices(raw: str | None = None) -> dict[str, Decimal]:
    """Parse `TESSERA_GPU_HOUR_PRICES` ("H100=4.0,A100=2.5,default=1.0"): price per GPU-hour per model.
    Model names match case-insensitively; `default` prices every other model (0 when absent)."""
    from django.core.exceptions import ImproperlyConfigured

    text = settings.TESSERA_GPU_HOUR_PRICES if raw is None else raw
    prices: dict[str, Decimal] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        try:
            price = Decimal(value.strip())
        except ArithmeticError as exc:
            raise ImproperlyConfigured(
                f"TESSERA_GPU_HOUR_PRICES: {item!r} is not MODEL=PRICE"
            ) from exc
        if not sep or not name.strip() or price < 0:
            raise ImproperlyConfigured(f"TESSERA_GPU_HOUR_PRICES: {item!r} is not MODEL=PRICE")
        prices[name.strip().lower()] = price
    return prices


def price_for(model: str, prices: dict[str, Decimal]) -> Decimal:
    return prices.get(model.lower(), prices.get("default", Decimal(0)))


@dataclass(frozen=True)
class ChargebackRow:
    """GPU-hours allocated and used by a tenant on one GPU model in one month, and the charge
    (allocated GPU-hours × price per GPU-hour of the model)."""

    month: str
    tenant_slug: str
    tenant_name: str
    gpu_model: str
    allocated_gpu_hours: float
    used_gpu_hours: float
    price_per_gpu_hour: Decimal
    cost: Decimal


def chargeback(
    months: int, now: datetime, tenants: Sequence[Tenant] | None = None
) -> list[ChargebackRow]:
    """Per month (the current one and `months - 1` before it), tenant and GPU model, from hour rows."""
    if not 1 <= months <= 24:
        raise InvalidInput(
            f"months={months}: choose 1 to 24.", fields={"months": ["choose 1 to 24"]}
        )
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    for _ in range(months - 1):
        first = (first - timedelta(days=1)).replace(day=1)
    rows = QuotaSample.objects.filter(
        resolution=Resolution.HOUR, ts__gte=first, allocated_milli__gt=0
    ).exclude(gpu_model="")
    if tenants is not None:
        rows = rows.filter(tenant__in=list(tenants))
    grouped = (
        rows.annotate(month=TruncMonth("ts"))
        .values("month", "tenant_id", "gpu_model")
        .annotate(allocated=Sum("allocated_milli"), used=Sum("used_milli"))
        .order_by()
    )
    names = {t.pk: t for t in Tenant.objects.filter(pk__in={r["tenant_id"] for r in grouped})}
    prices = gpu_hour_prices()
    out = []
    for r in sorted(
        grouped, key=lambda r: (r["month"], names[r["tenant_id"]].slug, r["gpu_model"])
    ):
        tenant_row = names[r["tenant_id"]]
        r["tenant__slug"], r["tenant__name"] = tenant_row.slug, tenant_row.name
        allocated = round(float(r["allocated"] or 0) / MILLI_MINUTES_PER_GPU_HOUR, 3)
        price = price_for(r["gpu_model"], prices)
        out.append(
            ChargebackRow(
                month=r["month"].strftime("%Y-%m"),
                tenant_slug=r["tenant__slug"],
                tenant_name=r["tenant__name"],
                gpu_model=r["gpu_model"],
                allocated_gpu_hours=allocated,
                used_gpu_hours=round(float(r["used"] or 0) / MILLI_MINUTES_PER_GPU_HOUR, 3),
                price_per_gpu_hour=price,
                cost=(Decimal(str(allocated)) * price).quantize(Decimal("0.01")),
            )
        )
    return out
