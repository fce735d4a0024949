"""The monthly bill from the database: physical GPU-hours from the inventory, allocated and used
GPU-hours per team and GPU model from the hour rows (QuotaSample), prices from
`TESSERA_GPU_HOUR_PRICES`; split by `scheduling.telemetry.bill` (pure) so the parts add up to the cent.

A card counts from its node's creation (or the month's start) to the month's end (or now). Teams in
`TESSERA_CHARGEBACK_PLATFORM_TEAMS` (slugs) are the platform's own workloads: billed as overhead.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from django.conf import settings
from django.db.models import Sum

from core.units import MILLI_MINUTES_PER_GPU_HOUR
from portal.csv_export import csv_writer
from portal.errors import InvalidInput
from portal.models import Tenant
from scheduling.models import Gpu
from scheduling.telemetry.bill import Bill, BillLine, ModelHours, make_bill
from scheduling.telemetry.models import QuotaSample, Resolution
from scheduling.telemetry.series import gpu_hour_prices, price_for

SECONDS_PER_HOUR = 3600
EARLIEST_YEAR = 2000


def month_bounds(month: str) -> tuple[datetime, datetime]:
    """[start, end) of "YYYY-MM" in UTC; InvalidInput naming `month` otherwise."""
    match = re.fullmatch(r"(\d{4})-(\d{2})", month or "")
    if not match or not 1 <= int(match.group(2)) <= 12 or int(match.group(1)) < EARLIEST_YEAR:
        message = "Give a month as YYYY-MM (2000-01 or later)."
        raise InvalidInput(f"month: {message}", fields={"month": [message]})
    start = datetime(int(match.group(1)), int(match.group(2)), 1, tzinfo=UTC)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def _milli_minutes(value: float | None) -> Fraction:
    """A summed milli-minute figure as an exact fraction (to a millionth of a milli-minute)."""
    return Fraction(round(float(value or 0) * 1_000_000), 1_000_000)


def monthly_bill(month: str, now: datetime) -> Bill:
    """The bill of `month` (module docstring); a month that has not started bills nothing."""
    start, end = month_bounds(month)
    end = min(end, max(now, start))
    prices = gpu_hour_prices()
    physical: dict[str, Fraction] = defaultdict(Fraction)
    for model, created in Gpu.objects.values_list("model", "node__created_at"):
        begin = max(start, created) if created else start
        if begin < end:
            seconds = int((end - begin).total_seconds())
            physical[model.lower()] += Fraction(seconds, SECONDS_PER_HOUR)
    allocated: dict[str, dict[str, Fraction]] = defaultdict(dict)
    used: dict[str, dict[str, Fraction]] = defaultdict(dict)
    slugs = dict(Tenant.objects.values_list("pk", "slug"))
    for row in (
        QuotaSample.objects.filter(resolution=Resolution.HOUR, ts__gte=start, ts__lt=end)
        .exclude(gpu_model="")
        .values("tenant_id", "gpu_model")
        .annotate(allocated=Sum("allocated_milli"), used=Sum("used_milli"))
        .order_by()
    ):
        model, team = row["gpu_model"].lower(), slugs[row["tenant_id"]]
        allocated[model][team] = _milli_minutes(row["allocated"]) / MILLI_MINUTES_PER_GPU_HOUR
        used[model][team] = _milli_minutes(row["used"]) / MILLI_MINUTES_PER_GPU_HOUR
    names = {g.lower(): g for g in Gpu.objects.values_list("model", flat=True).distinct()}
    models = [
        ModelHours(
            model=names.get(model, model),
            price_per_gpu_hour=price_for(model, prices),
            physical_gpu_hours=physical.get(model, Fraction(0)),
            allocated=allocated.get(model, {}),
            used=used.get(model, {}),
        )
        for model in sorted(set(physical) | set(allocated))
    ]
    platform = frozenset(settings.TESSERA_CHARGEBACK_PLATFORM_TEAMS)
    return make_bill(month, settings.TESSERA_CHARGEBACK_CURRENCY, models, platform)


def visible_lines(bill: Bill, team_slugs: set[str] | None) -> list[BillLine]:
    """The lines a person may see: all (operators, `team_slugs` None) or their teams' own."""
    if team_slugs is None:
        return list(bill.lines)
    return [line for line in bill.lines if line.part in team_slugs]


CSV_HEADER = [
    "month",
    "gpu_model",
    "part",
    "allocated_gpu_hours",
    "allocation_charge",
    "used_gpu_hours",
    "usage_charge",
    "currency",
]


def bill_csv(bill: Bill, lines: list[BillLine]) -> str:
    """The lines as CSV (GPU-hours to 3 decimals, amounts to the cent)."""
    out = io.StringIO()
    writer = csv_writer(out)
    writer.writerow(CSV_HEADER)
    for line in lines:
        writer.writerow(
            [
                bill.period,
                line.model,
                line.part,
                f"{line.allocated_hours}",
                f"{line.allocation_charge:.2f}",
                f"{line.used_hours}",
                f"{line.usage_charge:.2f}",
                bill.currency,
            ]
        )
    return out.getvalue()
