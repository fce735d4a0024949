"""Demo telemetry: 30 days of synthetic history so `make run` opens on dashboards with data (idempotent:
skipped when hour rows exist)."""

from __future__ import annotations

from typing import IO

from scheduling.telemetry.backfill import backfill
from scheduling.telemetry.models import WorkloadHourly


def seed(stdout: IO[str] | None = None) -> None:
    """Backfill 30 days of hourly rollups and 2 hours of minute rows from the demo cluster's placements."""
    if WorkloadHourly.objects.exists():
        if stdout:
            stdout.write("telemetry: history already present, skipped\n")
        return
    report = backfill(30, raw_hours=2)
    if stdout:
        stdout.write(
            f"telemetry: {report.hours} hours of history, {report.workload_hour_rows} workload-hours, "
            f"{report.minutes} minutes of samples\n"
        )
