"""manage.py backfill_telemetry — synthetic history so a fresh demo has charts with data."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.telemetry.backfill import BackfillRefused, backfill


class Command(BaseCommand):
    help = (
        "Write synthetic telemetry history from the current placements: hourly rollups for --days, "
        "minute rows for the last --raw-hours. Demo and benchmark data; never on a real cluster."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days", type=int, default=30, help="days of hourly rollups (default 30)"
        )
        parser.add_argument(
            "--raw-hours", type=int, default=2, help="hours of minute rows before now (default 2)"
        )
        parser.add_argument(
            "--replace", action="store_true", help="overwrite hour rows already in the range"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days, raw_hours = options["days"], options["raw_hours"]
        if not 1 <= days <= 400:
            raise CommandError(f"--days={days}: choose 1 to 400 (hour rows are kept 400 days)")
        if not 0 <= raw_hours <= 47:
            raise CommandError(
                f"--raw-hours={raw_hours}: choose 0 to 47 (minute rows are kept 48 h)"
            )
        try:
            report = backfill(days, raw_hours=raw_hours, replace=options["replace"])
        except BackfillRefused as exc:
            raise CommandError(f"{exc}; pass --replace to overwrite them") from exc
        self.stdout.write(
            f"telemetry backfill: {report.hours} hours, {report.workload_hour_rows} workload-hours, "
            f"{report.quota_rows} quota rows, {report.pool_rows} pool rows, {report.minutes} minutes"
        )
