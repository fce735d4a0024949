"""Idle auto-stop on the simulated cluster: warned after the window, stopped after the grace period, home
kept, resumed on request; "keep" and a busy GPU clear the warning. Time is driven with time_machine and
telemetry is ingested minute by minute through the real ingestion path with a fixed utilization."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from codespaces import idle, services
from codespaces.choices import CodespaceState as S
from codespaces.choices import EventKind
from codespaces.models import Codespace
from codespaces.tests.test_services import BackendSpy, create, run_status_sync
from scheduling.models import Gpu
from scheduling.telemetry.ingestion import SyntheticMetrics, ingest_minute
from scheduling.telemetry.samples import MinuteMetrics, Share

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


class FixedUtilization(SyntheticMetrics):
    """The simulated cluster, except every workload's SM utilization is `percent`."""

    def __init__(self, percent: float) -> None:
        self.percent = percent

    def measure(
        self, minute: datetime, shares: Sequence[Share], gpus: Sequence[Gpu]
    ) -> MinuteMetrics:
        metrics = super().measure(minute, shares, gpus)
        metrics.workload_utilization = {s.workload_id: self.percent for s in shares}
        return metrics


def ingest(traveller: Any, start: int, end: int, percent: float) -> None:
    """Record telemetry for minutes start..end-1 after T0 at `percent` utilization."""
    source = FixedUtilization(percent)
    for minute in range(start, end):
        traveller.move_to(T0 + timedelta(minutes=minute, seconds=30))
        ingest_minute(source=source, rollup=False)


def at(traveller: Any, minutes: int) -> idle.IdleReport:
    traveller.move_to(T0 + timedelta(minutes=minutes))
    return idle.check_idle_codespaces()


@pytest.fixture
def running(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> Any:
    with time_machine.travel(T0, tick=False) as traveller:
        codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
        assert codespace.state == S.RUNNING
        yield codespace, traveller


def test_idle_codespace_is_warned_then_stopped_home_kept_then_resumed(
    running: Any, bob: Any, django_capture_on_commit_callbacks: Any, monkeypatch: Any
) -> None:
    codespace, traveller = running
    spy = BackendSpy(monkeypatch)
    capture = django_capture_on_commit_callbacks
    ingest(traveller, 0, 61, percent=1.0)

    # one minute short of the window: nothing
    assert at(traveller, 59).warned == []
    # the window (60 min below 5 %, no activity) has passed: warned, not stopped
    report = at(traveller, 61)
    assert (report.warned, report.stopped) == (["bob-dev"], [])
    codespace.refresh_from_db()
    assert (codespace.state, codespace.idle_warned_at) == (S.RUNNING, T0 + timedelta(minutes=61))
    warning = codespace.events.get(kind=EventKind.IDLE_WARNING)
    assert warning.message == (
        "Idle: GPU utilization averaged 1.0% (threshold 5%) and no activity for 60 min. It will be "
        "stopped at 10:16 UTC unless you keep it; the home volume is kept either way."
    )
    # a second check inside the grace period changes nothing
    ingest(traveller, 61, 76, percent=1.0)
    assert at(traveller, 70) == idle.IdleReport(checked=1)

    # grace over, still idle: stopped, home kept, GPU-hours recorded
    with capture(execute=True):
        report = at(traveller, 76)
    assert report.stopped == ["bob-dev"]
    codespace.refresh_from_db()
    assert codespace.state == S.STOPPED
    assert codespace.idle_stopped_at == T0 + timedelta(minutes=76)
    assert spy.calls == [(codespace.workload_id, False)]
    stopped = codespace.events.get(kind=EventKind.IDLE_STOPPED)
    assert stopped.data == {
        "utilization": 1.0,
        "gpu_fraction": 0.25,
        "idle_gpu_hours_held": round(76 / 60 * 0.25, 3),
    }
    assert services.savings(now=T0 + timedelta(minutes=136)).gpu_hours_freed_by_idle_stop == 0.25

    # it resumes on request, on the same home volume, and the freed GPU-hours are credited
    traveller.move_to(T0 + timedelta(minutes=136))
    with capture(execute=True):
        services.start_codespace(codespace, actor=bob)
    run_status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.RUNNING
    assert (codespace.home_gib, codespace.idle_stopped_at) == (50, None)
    assert codespace.gpu_hours_freed == pytest.approx(0.25)


def test_keep_clears_the_warning_and_restarts_the_idle_timer(running: Any, bob: Any) -> None:
    codespace, traveller = running
    ingest(traveller, 0, 61, percent=0.5)
    assert at(traveller, 61).warned == ["bob-dev"]
    traveller.move_to(T0 + timedelta(minutes=62))
    services.keep_codespace(Codespace.objects.get(pk=codespace.pk), actor=bob)
    codespace.refresh_from_db()
    assert (codespace.idle_warned_at, codespace.last_activity_at) == (
        None,
        T0 + timedelta(minutes=62),
    )
    ingest(traveller, 61, 124, percent=0.5)
    # where it would have been stopped: nothing happens, the owner was active 14 minutes ago
    assert at(traveller, 76) == idle.IdleReport(checked=1)
    # a whole window after "keep": warned again
    assert at(traveller, 123).warned == ["bob-dev"]
    assert codespace.events.filter(kind=EventKind.KEPT).count() == 1


def test_busy_gpu_clears_the_warning(running: Any) -> None:
    codespace, traveller = running
    ingest(traveller, 0, 61, percent=2.0)
    assert at(traveller, 61).warned == ["bob-dev"]
    ingest(traveller, 61, 70, percent=90.0)
    report = at(traveller, 70)
    assert (report.cleared, report.stopped) == (["bob-dev"], [])
    codespace.refresh_from_db()
    assert (codespace.state, codespace.idle_warned_at) == (S.RUNNING, None)


def test_no_samples_never_stops(running: Any) -> None:
    codespace, traveller = running
    assert at(traveller, 200) == idle.IdleReport(checked=1)
    codespace.refresh_from_db()
    assert (codespace.state, codespace.idle_warned_at) == (S.RUNNING, None)


def test_a_codespace_that_raises_does_not_stop_the_others(
    running: Any,
    bob: Any,
    team_a: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: Any,
    caplog: Any,
) -> None:
    # issue 9: one bad row (an OverflowError) made every codespace after it skip its idle check
    codespace, traveller = running
    other = create(bob, team_a, "bob-two", django_capture_on_commit_callbacks)
    ingest(traveller, 0, 61, percent=1.0)
    original = idle._check_one
    first: list[str] = []

    def flaky(candidate: Codespace, **kwargs: Any) -> None:
        if not first:  # whichever comes first raises
            first.append(candidate.name)
            raise OverflowError("date value out of range")
        original(candidate, **kwargs)

    monkeypatch.setattr(idle, "_check_one", flaky)
    with caplog.at_level("ERROR", logger="tessera.periodic"):
        report = at(traveller, 61)
    [bad] = first
    good = ({"bob-dev", "bob-two"} - {bad}).pop()
    bad_pk = codespace.pk if bad == "bob-dev" else other.pk
    assert (report.checked, report.warned, report.failed_ids) == (2, [good], [bad_pk])
    assert [r.getMessage() for r in caplog.records] == [f"idle-stop: codespace {bad_pk} failed"]
    assert Codespace.objects.get(name=bad).idle_warned_at is None


def test_the_idle_task_reports_failures(running: Any, monkeypatch: Any) -> None:
    from codespaces.tasks import check_idle_codespaces_task

    codespace, traveller = running
    ingest(traveller, 0, 61, percent=1.0)

    def broken(candidate: Codespace, **kwargs: Any) -> None:
        raise ValueError("bad row")

    monkeypatch.setattr(idle, "_check_one", broken)
    traveller.move_to(T0 + timedelta(minutes=61))
    assert check_idle_codespaces_task() == {
        "checked": 1,
        "warned": [],
        "stopped": [],
        "cleared": [],
        "failed": 1,
        "failed_ids": [codespace.pk],
    }
