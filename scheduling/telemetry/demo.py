"""Demo telemetry for `manage.py seed_demo` (runs last): a few GPU jobs per demo quota, placed by one
scheduling cycle, then 30 days of synthetic history from them, so `make run` opens on dashboards with
data. Idempotent: jobs are found by name, and history is written only when none exists."""

from __future__ import annotations

from typing import IO

from portal.errors import DomainError
from quotas.models import Quota, QuotaGroup
from scheduling.models import Placement, Workload
from scheduling.services import run_cycle, submit_workload
from scheduling.telemetry.backfill import backfill
from scheduling.telemetry.models import WorkloadHourly

# name, profile, gpu count, milli per GPU, memory MiB per GPU (0 = whole card)
DEMO_JOBS = (
    ("demo-train", "training", 1, 1000, 0),
    ("demo-serve", "inference", 1, 500, 20480),
    ("demo-notebook", "development", 1, 250, 10240),
)


def _submit_demo_jobs() -> int:
    submitted = 0
    for quota in Quota.objects.select_related("tenant", "group").order_by("group__name", "name"):
        for name, profile, count, milli, memory in DEMO_JOBS:
            if Workload.objects.filter(
                tenant=quota.tenant, name=f"{name}-{quota.group.name}"
            ).exists():
                continue
            try:
                submit_workload(
                    tenant=quota.tenant,
                    quota=quota,
                    kind="job_pod",
                    name=f"{name}-{quota.group.name}",
                    cpu_milli=2000,
                    memory_mib=8192,
                    gpu_count=count,
                    gpu_milli=milli,
                    gpu_memory_mib=memory,
                    profile=profile,
                )
            except DomainError:
                continue  # a quota too small for this shape: the demo simply has one job less
            submitted += 1
    return submitted


# The demo's history: every dashboard's 24-hour view from minute rows, its 30-day view from hour rows.
DEMO_MINUTE_HOURS = 24
DEMO_HOUR_DAYS = 30


def seed(stdout: IO[str] | None = None) -> None:
    """Submit and place the demo jobs, then backfill 30 days of hourly rollups and the last 24 hours
    of minutes (in bulk: `backfill.backfill_minutes`)."""
    submitted = _submit_demo_jobs()
    for group in QuotaGroup.objects.all():
        run_cycle(group.pk)
    if WorkloadHourly.objects.exists():
        if stdout:
            stdout.write(f"telemetry: {submitted} demo jobs submitted; history already present\n")
        return
    if not Placement.objects.filter(released_at__isnull=True).exists():
        if stdout:
            stdout.write(
                "telemetry: nothing is placed yet; run `manage.py backfill_telemetry` once work runs\n"
            )
        return
    report = backfill(DEMO_HOUR_DAYS, raw_hours=DEMO_MINUTE_HOURS)
    if stdout:
        stdout.write(
            f"telemetry: {submitted} demo jobs; {report.hours} hours of history, "
            f"{report.workload_hour_rows} workload-hours, {report.minutes} minutes of samples\n"
        )
