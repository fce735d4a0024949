"""`manage.py audit`: run the invariant auditor once and print what it finds (exit code 1 on any
violation or failed check)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.services.audit import INVARIANT_NAMES, AuditReport, record_audit, run_audit

FINDINGS_SHOWN = 20


def _format_finding(finding: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in finding.items())


def format_table(report: AuditReport) -> str:
    """The report as a plain-text table: one line per invariant, then its first findings."""
    width = max(len(name) for name in INVARIANT_NAMES)
    lines = [f"{'invariant':<{width}}  {'status':<8}  {'count':>5}  description"]
    for result in report.results:
        lines.append(
            f"{result.name:<{width}}  {result.status:<8}  {result.count:>5}  {result.description}"
        )
        if result.error:
            lines.append(f"    error: {result.error}")
        for finding in result.findings[:FINDINGS_SHOWN]:
            lines.append(f"    {_format_finding(finding)}")
        if result.count > FINDINGS_SHOWN:
            lines.append(f"    ... and {result.count - FINDINGS_SHOWN} more")
    lines.append(
        f"{report.violations} violations in {len(report.results)} invariants "
        f"({report.duration_ms:.0f} ms)"
    )
    return "\n".join(lines)


class Command(BaseCommand):
    help = "Check the scheduler's invariants on this database; exit 1 on any violation."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
        parser.add_argument(
            "--grace",
            type=float,
            default=None,
            help="Seconds a transient mismatch may last (default TESSERA_AUDIT_GRACE_SECONDS).",
        )
        parser.add_argument(
            "--only",
            action="append",
            choices=INVARIANT_NAMES,
            default=[],
            help="Check only this invariant (repeatable).",
        )
        parser.add_argument(
            "--record",
            action="store_true",
            help="Store the run like the periodic task does (operators' page, /metrics).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        grace_seconds = options["grace"]
        if grace_seconds is not None and not 0 <= grace_seconds <= 86400:
            raise CommandError("--grace: give seconds between 0 and 86400.")
        report = run_audit(
            grace=None if grace_seconds is None else timedelta(seconds=grace_seconds),
            only=options["only"],
        )
        if options["record"]:
            record_audit(report)
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
        else:
            self.stdout.write(format_table(report))
        if report.violations or report.errors:
            raise SystemExit(1)
