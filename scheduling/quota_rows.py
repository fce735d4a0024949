"""The scheduling app's rows as quotas counts them (quotas.cluster.ClusterRows), installed at app ready."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import QuerySet, Sum

from core.units import MILLI_MINUTES_PER_GPU_HOUR
from quotas.fairness import UsageHour
from scheduling.choices import ACTIVE_STATES, WorkloadState
from scheduling.models import Node, Reservation, Workload
from scheduling.telemetry.models import QuotaSample, Resolution
from scheduling.telemetry.series import gpu_hour_prices


class SchedulingRows:
    """Nodes, reservations and workloads from the scheduling tables."""

    active_states: frozenset[str] = frozenset(ACTIVE_STATES)

    def nodes(self) -> QuerySet[Any]:
        return Node.objects.all()

    def reservations(self, node_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
        return {
            r.node_id: (int(r.cpu_milli), int(r.memory_mib))
            for r in Reservation.objects.filter(node__in=list(node_ids))
        }

    def charged_workloads(self, group_id: int) -> QuerySet[Any]:
        return (
            Workload.objects.filter(
                quota__group_id=group_id, state__in=[WorkloadState.PENDING, *ACTIVE_STATES]
            )
            .select_related("gang")
            .order_by("id")
        )

    def gpu_usage_hours(self, group_id: int, since: datetime, until: datetime) -> list[UsageHour]:
        """Hour rows of QuotaSample in [since, until); for hours without one yet (the current hour, an
        hour the rollup has not reached), its minute rows summed per hour."""
        samples = QuotaSample.objects.filter(group_id=group_id, ts__gte=since, ts__lt=until)
        hourly = (
            samples.filter(resolution=Resolution.HOUR)
            .values("quota_id", "gpu_model", "ts")
            .annotate(milli=Sum("allocated_milli"))
            .order_by()
        )
        rows: dict[tuple[int, str, datetime], float] = {}
        covered: set[datetime] = set()
        for r in hourly:
            covered.add(r["ts"])
            key = (int(r["quota_id"]), str(r["gpu_model"]), r["ts"])
            rows[key] = rows.get(key, 0.0) + float(r["milli"] or 0)
        minutes = samples.filter(resolution=Resolution.MINUTE).values_list(
            "quota_id", "gpu_model", "ts", "allocated_milli"
        )
        for quota_id, model, ts, milli in minutes:
            hour = ts.replace(minute=0, second=0, microsecond=0)
            if hour in covered:
                continue
            key = (int(quota_id), str(model), hour)
            rows[key] = rows.get(key, 0.0) + float(milli or 0)
        return [
            UsageHour(quota_id, hour, milli / MILLI_MINUTES_PER_GPU_HOUR, model)
            for (quota_id, model, hour), milli in sorted(rows.items())
        ]

    def gpu_hour_prices(self) -> dict[str, float]:
        return {name.lower(): float(price) for name, price in gpu_hour_prices().items()}
