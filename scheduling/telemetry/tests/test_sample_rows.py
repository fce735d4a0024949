"""The one builder of quota and pool sample rows (ingestion, rollups and backfill all use it): unsaved
instances, no database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduling.telemetry.models import Resolution
from scheduling.telemetry.sample_rows import (
    PoolWaits,
    QuotaIds,
    Window,
    pool_row,
    quota_figures_row,
    quota_sum_row,
    quota_usage_row,
)

MINUTE = datetime(2026, 12, 2, 9, 17, tzinfo=UTC)
HOUR = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
IDS = QuotaIds(group_id=3, quota_id=7, tenant_id=11)


def test_a_figures_row_has_no_gpu_model_and_no_usage() -> None:
    row = quota_figures_row(
        Window.minute(MINUTE),
        IDS,
        {"min_milli": 2000, "max_milli": 8000, "runtime_milli": 3000, "pending": 4},
    )
    assert (row.resolution, row.ts, row.minutes) == (Resolution.MINUTE, MINUTE, 1)
    assert (row.group_id, row.quota_id, row.tenant_id, row.gpu_model) == (3, 7, 11, "")
    assert (row.min_milli, row.max_milli, row.runtime_milli, row.borrowed_milli) == (
        2000,
        8000,
        3000,
        0,
    )
    assert (row.pending, row.allocated_milli, row.used_milli, row.idle_milli) == (4, 0, 0, 0)


def test_a_usage_row_names_its_gpu_model_and_a_node_without_one_as_unknown() -> None:
    named = quota_usage_row(
        Window.hour(HOUR),
        IDS,
        "H100",
        allocated_milli=60000.0,
        used_milli=1234.5,
        idle_milli=0.0,
    )
    unnamed = quota_usage_row(
        Window.hour(HOUR), IDS, "", allocated_milli=1.0, used_milli=0.0, idle_milli=1.0
    )
    assert (named.resolution, named.minutes, named.gpu_model) == (Resolution.HOUR, 60, "H100")
    assert (named.allocated_milli, named.used_milli, named.idle_milli, named.min_milli) == (
        60000.0,
        1234.5,
        0.0,
        0,
    )
    assert unnamed.gpu_model == "unknown"


def test_an_hour_row_of_a_partial_hour_counts_its_minutes() -> None:
    row = quota_sum_row(Window.hour(HOUR, 42), IDS, "A100", {"allocated_milli": 42000.0})
    assert (row.ts, row.minutes, row.gpu_model, row.allocated_milli) == (HOUR, 42, "A100", 42000.0)


def test_a_pool_row_takes_its_wait_percentiles_from_the_placements() -> None:
    row = pool_row(
        Window.minute(MINUTE),
        5,
        {"capacity_gpus": 8, "allocated_gpus": 3, "pending": 2},
        PoolWaits.of([10.0, 20.0, 30.0, 40.0, 50.0]),
        cycle_ms=12.5,
    )
    assert (row.group_id, row.capacity_gpus, row.allocated_gpus, row.pending) == (5, 8, 3, 2)
    assert (row.capacity_milli, row.sm_utilization) == (0, 0)
    assert (row.wait_p50_seconds, row.wait_p95_seconds, row.placed_count) == (30.0, 48.0, 5)
    assert row.cycle_ms == 12.5


def test_a_pool_with_no_placements_has_no_wait_figures() -> None:
    row = pool_row(Window.hour(HOUR), 5, {}, PoolWaits.of([]))
    assert (row.wait_p50_seconds, row.wait_p95_seconds, row.placed_count, row.cycle_ms) == (
        None,
        None,
        0,
        None,
    )


@pytest.mark.parametrize(
    ("_case", "build"),
    [
        (
            "usage column in a figures row",
            lambda: quota_figures_row(Window.minute(MINUTE), IDS, {"used_milli": 1.0}),
        ),
        (
            "not a quota column",
            lambda: quota_sum_row(Window.minute(MINUTE), IDS, "", {"capacity_gpus": 1.0}),
        ),
        (
            "not a pool column",
            lambda: pool_row(Window.minute(MINUTE), 5, {"min_milli": 1.0}, PoolWaits.of([])),
        ),
    ],
)
def test_a_column_that_is_not_summed_there_is_refused(_case: str, build: object) -> None:
    with pytest.raises(ValueError, match="not summed columns"):
        build()  # type: ignore[operator]
