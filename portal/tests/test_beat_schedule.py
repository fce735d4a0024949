"""The beat schedule: a periodic sweep that could not start within its own interval is dropped (the next
one is already queued and does the same), so a busy worker's queue does not fill with stale copies that
the work queued behind them (placements made real, reclaim notices delivered) must wait for."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings


def test_every_interval_task_expires_after_its_interval() -> None:
    interval_entries = {
        name: entry
        for name, entry in settings.CELERY_BEAT_SCHEDULE.items()
        if isinstance(entry["schedule"], int | float | timedelta)
    }
    assert "scheduling-cycles" in interval_entries
    assert {
        name: entry.get("options", {}).get("expires") for name, entry in interval_entries.items()
    } == {
        name: float(
            entry["schedule"].total_seconds()
            if isinstance(entry["schedule"], timedelta)
            else entry["schedule"]
        )
        for name, entry in interval_entries.items()
    }
