"""Synthetic utilization: deterministic, and shaped by profile."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta

from scheduling.telemetry import synthetic

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


def minutes(n: int) -> list[datetime]:
    return [T0 + timedelta(minutes=i) for i in range(n)]


def test_same_workload_and_minute_give_the_same_value_and_seconds_do_not_matter():
    assert synthetic.utilization(7, "development", T0) == synthetic.utilization(
        7, "development", T0 + timedelta(seconds=59)
    )
    assert synthetic.memory_used_mib(7, "training", T0, 20480) == synthetic.memory_used_mib(
        7, "training", T0 + timedelta(seconds=30), 20480
    )


def test_profiles_stay_in_their_bands_over_a_day():
    day = minutes(24 * 60)
    training = [synthetic.utilization(1, "training", m) for m in day]
    inference = [synthetic.utilization(2, "inference", m) for m in day]
    development = [synthetic.utilization(3, "development", m) for m in day]
    assert min(training) >= 80.0
    assert max(training) <= 98.0
    assert min(inference) >= 45.0
    assert max(inference) <= 65.0
    idle = [u for u in development if u < synthetic.IDLE_THRESHOLD_PERCENT]
    busy = [u for u in development if u >= 40.0]
    # mostly idle with bursts: every minute is one or the other, bursts come in 20-minute windows
    assert len(idle) + len(busy) == 24 * 60
    assert 0.6 * 1440 < len(idle) < 0.95 * 1440
    assert len(busy) % synthetic.BURST_WINDOW_MINUTES == 0
    assert statistics.fmean(training) > statistics.fmean(inference) > statistics.fmean(development)


def test_memory_used_is_a_profile_share_of_the_allocation():
    used = [synthetic.memory_used_mib(5, "training", m, 10000) for m in minutes(120)]
    assert min(used) >= 8500
    assert max(used) <= 9500
    dev = [synthetic.memory_used_mib(5, "development", m, 10000) for m in minutes(120)]
    assert min(dev) >= 3000
    assert max(dev) <= 6000


def test_is_idle_below_threshold_or_missing():
    assert synthetic.is_idle(None) is True
    assert synthetic.is_idle(4.9) is True
    assert synthetic.is_idle(5.0) is False
