"""Waste reports: GPU-hours a team held but did not use, by person and by template, its codespaces
that were never used, its jobs whose GPUs sit idle, and the top savings ("stopping these 6 codespaces
frees 4.5 GPUs"); the weekly digest sent to the team's admins.

Read from telemetry's hour rows (WorkloadHourly, kept 400 days): an hour of a workload is **idle**
when its mean use of its own allocation (used / allocated milli-minutes) is below the threshold
(`TESSERA_WASTE_IDLE_PERCENT`, default 5 %); its allocated GPU-hours then count as idle. The window
is the last `TESSERA_WASTE_WINDOW_DAYS` days (default 7). A codespace whose workload has been idle
for every hour of the last day is a saving: stopping it frees its GPUs.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings

from codespaces.choices import CodespaceState
from codespaces.models import Codespace
from core.units import MILLI_MINUTES_PER_GPU_HOUR, MILLI_PER_GPU
from portal.csv_export import csv_writer
from portal.errors import InvalidInput
from portal.models import Tenant
from portal.notifications import deliver
from scheduling.choices import ACTIVE_STATES, WorkloadKind
from scheduling.models import Workload
from scheduling.telemetry.models import WorkloadHourly
from scheduling.telemetry.services import last_activity

NO_OWNER = "(no owner)"
JOBS = "(jobs, no template)"
MAX_WINDOW_DAYS = 90
TOP_SAVINGS = 10


@dataclass(frozen=True)
class WastePolicy:
    idle_percent: float = 5.0
    window_days: int = 7

    def __post_init__(self) -> None:
        if not 0 < self.idle_percent <= 100:
            raise InvalidInput(
                "idle_percent: between 0 and 100.", fields={"idle_percent": ["between 0 and 100"]}
            )
        if not 1 <= self.window_days <= MAX_WINDOW_DAYS:
            message = f"between 1 and {MAX_WINDOW_DAYS} days"
            raise InvalidInput(f"window_days: {message}.", fields={"window_days": [message]})


def waste_policy() -> WastePolicy:
    return WastePolicy(
        idle_percent=settings.TESSERA_WASTE_IDLE_PERCENT,
        window_days=settings.TESSERA_WASTE_WINDOW_DAYS,
    )


@dataclass(frozen=True)
class WasteLine:
    """Allocated and idle GPU-hours of one person, template or job."""

    name: str
    allocated_gpu_hours: float
    idle_gpu_hours: float

    @property
    def idle_percent(self) -> float:
        if not self.allocated_gpu_hours:
            return 0.0
        return round(100 * self.idle_gpu_hours / self.allocated_gpu_hours, 1)


@dataclass(frozen=True)
class Saving:
    """A running codespace idle for the whole last day: stopping it frees `gpus` GPUs."""

    codespace_id: int
    name: str
    owner: str
    gpus: float
    idle_gpu_hours: float


@dataclass(frozen=True)
class WasteReport:
    tenant: Tenant
    start: datetime
    end: datetime
    policy: WastePolicy
    allocated_gpu_hours: float
    idle_gpu_hours: float
    by_person: list[WasteLine]
    by_template: list[WasteLine]
    idle_jobs: list[WasteLine]
    never_used: list[Codespace]
    savings: list[Saving] = field(default_factory=list)

    @property
    def savings_gpus(self) -> float:
        return round(sum(s.gpus for s in self.savings), 3)

    @property
    def headline(self) -> str:
        if not self.savings:
            return "No codespace sat idle for the whole last day."
        n = len(self.savings)
        which = "this codespace" if n == 1 else f"these {n} codespaces"
        return f"Stopping {which} frees {self.savings_gpus:g} GPU{'s' if self.savings_gpus != 1 else ''}."


def _lines(acc: dict[str, list[float]]) -> list[WasteLine]:
    lines = [WasteLine(name, round(a, 3), round(i, 3)) for name, (a, i) in acc.items()]
    return sorted(lines, key=lambda line: (-line.idle_gpu_hours, line.name))


def waste_report(tenant: Tenant, now: datetime, policy: WastePolicy | None = None) -> WasteReport:
    """The team's waste over the policy's window ending at `now` (module docstring)."""
    policy = policy or waste_policy()
    start = now - timedelta(days=policy.window_days)
    day_ago = now - timedelta(days=1)
    codespaces = list(
        Codespace.objects.filter(tenant=tenant)
        .exclude(state=CodespaceState.DELETED)
        .select_related("owner", "template", "workload")
    )
    by_name = {c.name: c for c in codespaces}
    rows = (
        WorkloadHourly.objects.filter(tenant=tenant, hour__gte=start, hour__lt=now)
        .select_related("workload__owner")
        .order_by("hour", "workload_id")
    )
    person: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    template: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    jobs: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    last_day: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    workloads: dict[int, Workload] = {}
    total = [0.0, 0.0]
    for row in rows:
        allocated = row.allocated_milli_minutes / MILLI_MINUTES_PER_GPU_HOUR
        mean_use = 100 * row.used_milli_minutes / row.allocated_milli_minutes if allocated else 0
        idle = allocated if mean_use < policy.idle_percent else 0.0
        workload = row.workload
        workloads[workload.pk] = workload
        owner = workload.owner.get_username() if workload.owner else NO_OWNER
        codespace = by_name.get(workload.name) if workload.kind == WorkloadKind.CODESPACE else None
        for acc in (
            person[owner],
            template[codespace.template.name if codespace else JOBS],
            total,
        ):
            acc[0] += allocated
            acc[1] += idle
        if workload.kind != WorkloadKind.CODESPACE:
            jobs[workload.pk][0] += allocated
            jobs[workload.pk][1] += idle
        if row.hour >= day_ago:
            last_day[workload.pk][0] += allocated
            last_day[workload.pk][1] += idle

    idle_jobs = [
        WasteLine(workloads[w].name, round(a, 3), round(i, 3))
        for w, (a, i) in jobs.items()
        if workloads[w].state in ACTIVE_STATES and a > 0 and i == a
    ]
    activity = last_activity(c.workload_id for c in codespaces if c.workload_id)
    never_used = [
        c
        for c in codespaces
        if c.created_at < day_ago
        and c.gpu_count
        and (c.workload_id is None or activity.get(c.workload_id) is None)
    ]
    savings = []
    for c in codespaces:
        held = last_day.get(c.workload_id or 0)
        current = c.workload
        if current is None or held is None or current.state not in set(ACTIVE_STATES):
            continue
        if held[0] > 0 and held[1] == held[0]:
            savings.append(
                Saving(
                    codespace_id=c.pk,
                    name=c.name,
                    owner=c.owner.get_username(),
                    gpus=round(c.gpu_count * c.gpu_milli / MILLI_PER_GPU, 3),
                    idle_gpu_hours=round(held[1], 3),
                )
            )
    savings.sort(key=lambda s: (-s.gpus, -s.idle_gpu_hours, s.name))
    return WasteReport(
        tenant=tenant,
        start=start,
        end=now,
        policy=policy,
        allocated_gpu_hours=round(total[0], 3),
        idle_gpu_hours=round(total[1], 3),
        by_person=_lines(person),
        by_template=_lines(template),
        idle_jobs=sorted(idle_jobs, key=lambda line: (-line.idle_gpu_hours, line.name)),
        never_used=sorted(never_used, key=lambda c: c.name),
        savings=savings[:TOP_SAVINGS],
    )


def waste_csv(report: WasteReport) -> str:
    """The report as CSV: one row per person, template and idle job."""
    out = io.StringIO()
    writer = csv_writer(out)
    writer.writerow(
        ["team", "kind", "name", "allocated_gpu_hours", "idle_gpu_hours", "idle_percent"]
    )
    for kind, lines in (
        ("person", report.by_person),
        ("template", report.by_template),
        ("idle_job", report.idle_jobs),
    ):
        for line in lines:
            writer.writerow(
                [
                    report.tenant.slug,
                    kind,
                    line.name,
                    f"{line.allocated_gpu_hours:.3f}",
                    f"{line.idle_gpu_hours:.3f}",
                    f"{line.idle_percent:.1f}",
                ]
            )
    for c in report.never_used:
        writer.writerow([report.tenant.slug, "never_used_codespace", c.name, "", "", ""])
    return out.getvalue()


def digest_text(report: WasteReport, page_url: str) -> str:
    """The weekly digest sent to the team's admins (plain text)."""
    lines = [
        f"GPU waste of team {report.tenant.slug}, {report.start:%Y-%m-%d} to {report.end:%Y-%m-%d}",
        f"Held {report.allocated_gpu_hours:g} GPU-hours, idle {report.idle_gpu_hours:g} "
        f"(below {report.policy.idle_percent:g} % use).",
        report.headline,
    ]
    lines += [f"  - {s.name} ({s.owner}): {s.gpus:g} GPU" for s in report.savings]
    if report.never_used:
        lines.append("Never used: " + ", ".join(c.name for c in report.never_used))
    if report.idle_jobs:
        lines.append("Jobs with idle GPUs: " + ", ".join(j.name for j in report.idle_jobs))
    lines.append(f"Details: {page_url}")
    return "\n".join(lines) + "\n"


def teams_with_admins() -> Iterable[Tenant]:
    return Tenant.objects.filter(memberships__role="tenant_admin").distinct().order_by("slug")


def send_waste_digests(now: datetime) -> list[str]:
    """Send each team's digest (its admins by email, the webhook as JSON); returns the team slugs."""
    policy = waste_policy()
    sent = []
    for tenant in teams_with_admins():
        report = waste_report(tenant, now, policy)
        admins = [
            m.user.email
            for m in tenant.memberships.filter(role="tenant_admin").select_related("user")
            if m.user.email
        ]
        url = f"{settings.TESSERA_PORTAL_URL.rstrip('/')}/codespaces/waste/?team={tenant.slug}"
        payload = {
            "team": tenant.slug,
            "start": report.start.isoformat(),
            "end": report.end.isoformat(),
            "allocated_gpu_hours": report.allocated_gpu_hours,
            "idle_gpu_hours": report.idle_gpu_hours,
            "headline": report.headline,
            "savings": [
                {"codespace": s.name, "owner": s.owner, "gpus": s.gpus} for s in report.savings
            ],
            "never_used": [c.name for c in report.never_used],
            "idle_jobs": [j.name for j in report.idle_jobs],
            "url": url,
        }
        deliver(
            admins,
            settings.TESSERA_WASTE_WEBHOOK_URL,
            f"[tessera] GPU waste of {tenant.slug} this week: {report.headline}",
            digest_text(report, url),
            payload,
        )
        sent.append(tenant.slug)
    return sent
