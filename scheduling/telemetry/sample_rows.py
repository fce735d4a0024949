"""The one builder of quota and pool sample rows: live ingestion (minute rows), the hourly rollup (hour rows
summed from minutes) and the synthetic backfill (hour rows) all build their `QuotaSample` and `PoolSample`
instances here, so the three cannot disagree on what a row holds (its window, the quota's group and
tenant, the GPU model of a figures row, which columns are summed).

Pure: builds unsaved instances, never reads or writes the database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from quotas.models import Quota
from scheduling.telemetry.models import PoolSample, QuotaSample, Resolution
from scheduling.telemetry.samples import percentile

FIGURES_MODEL = ""
"""`gpu_model` of a quota's figures row (min / max / runtime share / borrowed / pending)."""
UNKNOWN_MODEL = "unknown"
"""`gpu_model` of a usage row whose node names no GPU model."""

QUOTA_FIGURES = ("min_milli", "max_milli", "runtime_milli", "borrowed_milli", "pending")
QUOTA_USAGE = ("allocated_milli", "used_milli", "idle_milli")
QUOTA_SUMS = QUOTA_USAGE + QUOTA_FIGURES
"""The QuotaSample columns that are sums over the row's minutes (an hour row adds its minute rows)."""

POOL_SUMS = (
    "capacity_gpus",
    "capacity_milli",
    "allocated_gpus",
    "allocated_milli",
    "sm_utilization",
    "pending",
    "codespace_cards_unsliced",
    "codespace_cards_occupied",
)
"""The PoolSample columns that are sums over the row's minutes (waits are recomputed per row)."""


@dataclass(frozen=True, slots=True)
class Window:
    """The span a row covers: `minutes` minutes from `ts`, at `resolution`."""

    resolution: str
    ts: datetime
    minutes: int

    @classmethod
    def minute(cls, ts: datetime) -> Window:
        return cls(Resolution.MINUTE, ts, 1)

    @classmethod
    def hour(cls, ts: datetime, minutes: int = 60) -> Window:
        """An hour row; `minutes` is the count of minute rows it sums (60 for a whole hour)."""
        return cls(Resolution.HOUR, ts, minutes)


@dataclass(frozen=True, slots=True)
class QuotaIds:
    """Whose row it is: the quota, its group and its tenant."""

    group_id: int
    quota_id: int
    tenant_id: int

    @classmethod
    def of(cls, quota: Quota) -> QuotaIds:
        return cls(int(quota.group_id), int(quota.pk), int(quota.tenant_id))


@dataclass(frozen=True, slots=True)
class PoolWaits:
    """Submit → placed wait percentiles (seconds) of a pool row and how many placements they cover."""

    p50_seconds: float | None
    p95_seconds: float | None
    placed_count: int

    @classmethod
    def of(cls, waits: Sequence[float]) -> PoolWaits:
        return cls(percentile(waits, 50), percentile(waits, 95), len(waits))


def _checked(
    values: Mapping[str, float], allowed: Sequence[str], model: str
) -> Mapping[str, float]:
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ValueError(f"not summed columns of {model}: {', '.join(unknown)}")
    return values


def quota_figures_row(window: Window, ids: QuotaIds, figures: Mapping[str, float]) -> QuotaSample:
    """A quota's figures row (gpu_model ""): `figures` among QUOTA_FIGURES, missing ones 0."""
    return quota_sum_row(window, ids, FIGURES_MODEL, _checked(figures, QUOTA_FIGURES, "figures"))


def quota_usage_row(
    window: Window,
    ids: QuotaIds,
    gpu_model: str,
    *,
    allocated_milli: float,
    used_milli: float,
    idle_milli: float,
) -> QuotaSample:
    """A quota's allocation, use and idle allocation on one GPU model (a node with no model:
    UNKNOWN_MODEL)."""
    return quota_sum_row(
        window,
        ids,
        gpu_model or UNKNOWN_MODEL,
        {"allocated_milli": allocated_milli, "used_milli": used_milli, "idle_milli": idle_milli},
    )


def quota_sum_row(
    window: Window, ids: QuotaIds, gpu_model: str, sums: Mapping[str, float]
) -> QuotaSample:
    """Any QuotaSample row: the summed columns in `sums` (among QUOTA_SUMS), the others 0."""
    return QuotaSample(
        resolution=window.resolution,
        ts=window.ts,
        minutes=window.minutes,
        group_id=ids.group_id,
        quota_id=ids.quota_id,
        tenant_id=ids.tenant_id,
        gpu_model=gpu_model,
        **_checked(sums, QUOTA_SUMS, "QuotaSample"),
    )


def pool_row(
    window: Window,
    group_id: int,
    sums: Mapping[str, float],
    waits: PoolWaits,
    *,
    cycle_ms: float | None = None,
) -> PoolSample:
    """A pool's row: the summed columns in `sums` (among POOL_SUMS, the others 0), the wait figures and
    (minute rows) the latency of the pool's last scheduling cycle."""
    return PoolSample(
        resolution=window.resolution,
        ts=window.ts,
        minutes=window.minutes,
        group_id=group_id,
        wait_p50_seconds=waits.p50_seconds,
        wait_p95_seconds=waits.p95_seconds,
        placed_count=waits.placed_count,
        cycle_ms=cycle_ms,
        **_checked(sums, POOL_SUMS, "PoolSample"),
    )
