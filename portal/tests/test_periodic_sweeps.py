"""`portal.periodic.claim_sweep` and the app's task class: a queued copy of a beat sweep that a later
run already covered is skipped; everything else runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from celery import shared_task
from django.conf import settings

from portal.celery import SENT_AT_HEADER, SWEEP_HEADER
from portal.models import SweepRun
from portal.periodic import claim_sweep

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
RUNS: list[str] = []


@shared_task(bind=True, name="portal.tests.sweep_probe")
def sweep_probe(self) -> str:  # type: ignore[no-untyped-def]
    RUNS.append(str(self.request.id))
    return str(self.request.id)


def _run_as_worker(task_id: str, sent_at: datetime, sweep: str = "probe") -> object:
    """Call the task the way a worker does: with its message's request pushed, not called directly."""
    sweep_probe.push_request(
        id=task_id,
        called_directly=False,
        **{SWEEP_HEADER: sweep, SENT_AT_HEADER: sent_at.timestamp()},
    )
    try:
        return sweep_probe()
    finally:
        sweep_probe.pop_request()


def test_the_first_run_of_a_sweep_claims_it():
    assert claim_sweep("sync", sent_at=T0, task_id="a", now=T0 + timedelta(seconds=1))
    run = SweepRun.objects.get(name="sync")
    assert (run.started_at, run.task_id) == (T0 + timedelta(seconds=1), "a")


def test_a_copy_sent_before_the_latest_run_started_is_skipped():
    claim_sweep("sync", sent_at=T0, task_id="a", now=T0 + timedelta(seconds=5))
    assert not claim_sweep("sync", sent_at=T0 + timedelta(seconds=4), task_id="b")
    assert SweepRun.objects.get(name="sync").task_id == "a"


def test_a_copy_sent_after_the_latest_run_started_runs_and_takes_the_claim():
    claim_sweep("sync", sent_at=T0, task_id="a", now=T0 + timedelta(seconds=5))
    later = T0 + timedelta(seconds=6)
    assert claim_sweep("sync", sent_at=later, task_id="c", now=later + timedelta(seconds=1))
    assert SweepRun.objects.get(name="sync").task_id == "c"


def test_the_redelivered_message_of_a_run_that_crashed_runs_again():
    claim_sweep("sync", sent_at=T0, task_id="a", now=T0 + timedelta(seconds=5))
    assert claim_sweep("sync", sent_at=T0, task_id="a", now=T0 + timedelta(seconds=30))


def test_sweeps_of_different_names_do_not_cover_each_other():
    claim_sweep("sync", sent_at=T0, task_id="a", now=T0 + timedelta(seconds=5))
    assert claim_sweep("audit", sent_at=T0 + timedelta(seconds=1), task_id="b")


def test_the_task_class_skips_a_covered_copy_and_keeps_the_request_of_the_one_it_runs():
    RUNS.clear()
    now = datetime.now(tz=UTC)
    assert _run_as_worker("first", now - timedelta(seconds=2)) == "first"
    assert _run_as_worker("older", now - timedelta(seconds=1)) is None  # sent before "first" ran
    assert _run_as_worker("newer", datetime.now(tz=UTC) + timedelta(seconds=1)) == "newer"
    assert RUNS == ["first", "newer"]


def test_a_message_without_beats_stamp_or_a_direct_call_always_runs():
    RUNS.clear()
    sweep_probe.push_request(id="plain", called_directly=False)
    try:
        assert sweep_probe() == "plain"
        assert sweep_probe() == "plain"
    finally:
        sweep_probe.pop_request()
    sweep_probe()  # called directly in code: Celery's own call, a fresh request
    assert len(RUNS) == 3
    assert not SweepRun.objects.exists()


def test_every_beat_entry_names_its_sweep_on_the_message():
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        options = entry["options"]
        assert isinstance(options, dict)
        assert options["headers"] == {SWEEP_HEADER: name}, name
