"""Idle auto-stop: a running codespace whose GPU sat below its template's threshold, with no activity, for
the idle window is warned (banner + event); still idle `idle_grace_minutes` after the warning, it is
stopped (home kept) and the GPU-hours it freed are recorded. The owner keeps it with one click
(`services.keep_codespace`, which records activity).

GPU utilization and activity come from telemetry (`scheduling.telemetry.services`). A GPU codespace
without any utilization sample in the window is never stopped (no data is not proof of idleness), and
CPU-only codespaces are left alone (there is no GPU signal to judge them by).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from codespaces import lifecycle, services
from codespaces.choices import CodespaceState, EventKind
from codespaces.models import Codespace
from portal.errors import Conflict
from portal.periodic import run_each
from scheduling.telemetry import services as telemetry

logger = logging.getLogger(__name__)


@dataclass
class IdleReport:
    """What one idle check did (codespace names), and the codespaces whose check raised (ids)."""

    checked: int = 0
    warned: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    failed_ids: list[int] = field(default_factory=list)


def _latest(*moments: datetime | None) -> datetime | None:
    present = [m for m in moments if m is not None]
    return max(present) if present else None


def check_idle_codespaces(now: datetime | None = None) -> IdleReport:
    """Warn, stop or clear every RUNNING codespace according to its template's idle policy. Each
    codespace is checked on its own (`portal.periodic.run_each`): one that raises is logged with its id
    and listed in `failed_ids`, and the others are still checked."""
    now = now or timezone.now()
    report = IdleReport()
    running = list(
        Codespace.objects.filter(state=CodespaceState.RUNNING)
        .exclude(workload__isnull=True)
        .select_related("template", "owner")
        .order_by("pk")
    )
    workload_ids = [c.workload_id for c in running if c.workload_id is not None]
    activity = telemetry.last_activity(workload_ids) if workload_ids else {}
    by_window: dict[int, list[int]] = {}
    for codespace in running:
        if codespace.workload_id is not None:
            by_window.setdefault(codespace.template.idle_window_minutes, []).append(
                codespace.workload_id
            )
    windows: dict[int, tuple[datetime, dict[int, float | None]]] = {}

    def window_of(minutes: int) -> tuple[datetime, dict[int, float | None]]:
        """The window's start and its mean utilization per workload, once per window length (it
        raises for a window no datetime can hold; then only that window's codespaces fail)."""
        if minutes not in windows:
            since = now - timedelta(minutes=minutes)
            windows[minutes] = (since, telemetry.mean_gpu_utilization(by_window[minutes], since))
        return windows[minutes]

    def check(codespace: Codespace) -> None:
        report.checked += 1
        since, utilization = window_of(codespace.template.idle_window_minutes)
        try:
            _check_one(
                codespace,
                now=now,
                since=since,
                utilization=utilization.get(codespace.workload_id),  # type: ignore[arg-type]
                telemetry_activity=activity.get(codespace.workload_id),  # type: ignore[arg-type]
                report=report,
            )
        except Conflict:
            logger.info("codespace %s changed during the idle check; skipped", codespace.name)

    failures = run_each(running, check, task="idle-stop", kind="codespace")
    report.failed_ids = failures.failed_ids
    return report


def _check_one(
    codespace: Codespace,
    *,
    now: datetime,
    since: datetime,
    utilization: float | None,
    telemetry_activity: datetime | None,
    report: IdleReport,
) -> None:
    template = codespace.template
    threshold = float(template.idle_threshold_percent)
    last_active = _latest(codespace.last_activity_at, telemetry_activity, codespace.started_at)
    recently_active = last_active is not None and last_active > since
    if not codespace.uses_gpu or utilization is None:
        # CPU-only codespaces have no GPU signal, and no samples is not proof of idleness.
        return
    busy_gpu = utilization >= threshold
    if recently_active or busy_gpu:
        if codespace.idle_warned_at is not None and lifecycle.update_in_state(
            codespace, expected=CodespaceState.RUNNING, idle_warned_at=None
        ):
            why = "GPU busy again" if busy_gpu else "activity seen"
            lifecycle.record_event(codespace, EventKind.NOTICE, f"Idle warning cleared: {why}.")
            report.cleared.append(codespace.name)
        return
    util_text = f"GPU utilization averaged {utilization:.1f}% (threshold {threshold:g}%)"
    window = template.idle_window_minutes
    if codespace.idle_warned_at is None:
        stop_at = now + timedelta(minutes=template.idle_grace_minutes)
        if lifecycle.update_in_state(
            codespace, expected=CodespaceState.RUNNING, idle_warned_at=now
        ):
            lifecycle.record_event(
                codespace,
                EventKind.IDLE_WARNING,
                f"Idle: {util_text} and no activity for {window} min. It will be stopped at "
                f"{stop_at:%H:%M} UTC unless you keep it; the home volume is kept either way.",
                data={"utilization": utilization, "stop_at": stop_at.isoformat()},
            )
            report.warned.append(codespace.name)
        return
    due = codespace.idle_warned_at + timedelta(minutes=template.idle_grace_minutes)
    if now < due:
        return
    idle_since = last_active or since
    idle_hours = max((now - idle_since).total_seconds(), 0) / 3600
    held = round(idle_hours * codespace.gpu_fraction, 3)
    services.stop_codespace(
        codespace,
        actor=None,
        reason=f"Idle auto-stop: {util_text} and no activity since {idle_since:%Y-%m-%d %H:%M} UTC.",
        kind=EventKind.IDLE_STOPPED,
        data={
            "utilization": utilization,
            "gpu_fraction": codespace.gpu_fraction,
            "idle_gpu_hours_held": held,
        },
        idle_stopped_at=now,
    )
    report.stopped.append(codespace.name)
