"""Deterministic synthetic GPU utilization for the simulated backend.

The same (workload id, minute) always gives the same numbers, in any process, so tests can state exact
values, a re-run ingestion writes the same samples and a backfill matches what the live ingestion would
have written. Profiles (scheduling.choices.UtilizationProfile):

* ``development`` — mostly idle (0–3 % SM) with bursts: each 20-minute window is a burst with probability
  0.2, and then SM is 40–90 %;
* ``inference`` — steady 45–65 %, a little higher in the working day (UTC 08–18);
* ``training`` — high, 80–98 %.

Utilization is a percentage of the workload's **own allocation** (a busy 25 % slice reads 100).
"""

from __future__ import annotations

import hashlib
from datetime import datetime

BURST_WINDOW_MINUTES = 20
BURST_PROBABILITY = 0.2
IDLE_THRESHOLD_PERCENT = 5.0
"""Below this SM utilization a minute counts as idle (idle allocated GPU-hours, last activity)."""


def unit_draw(*parts: object) -> float:
    """A deterministic number in [0, 1) from the parts (blake2b, stable across processes)."""
    digest = hashlib.blake2b("|".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _minute_number(at: datetime) -> int:
    return int(at.timestamp()) // 60


def utilization(workload_id: int, profile: str, at: datetime) -> float:
    """SM utilization (percent of the allocation, one decimal) of a workload in the minute of `at`."""
    minute = _minute_number(at)
    noise = unit_draw("u", workload_id, minute)
    if profile == "training":
        value = 80.0 + 18.0 * noise
    elif profile == "inference":
        hour = (minute // 60) % 24
        base = 50.0 if 8 <= hour < 18 else 45.0
        value = base + 15.0 * noise
    else:
        window = minute // BURST_WINDOW_MINUTES
        if unit_draw("burst", workload_id, window) < BURST_PROBABILITY:
            value = 40.0 + 50.0 * noise
        else:
            value = 3.0 * noise
    return round(value, 1)


def memory_used_mib(workload_id: int, profile: str, at: datetime, allocated_mib: int) -> int:
    """GPU memory used (MiB) by a workload in the minute of `at`, out of `allocated_mib`."""
    noise = unit_draw("m", workload_id, _minute_number(at))
    low, span = {"training": (0.85, 0.10), "inference": (0.60, 0.15)}.get(profile, (0.30, 0.30))
    return int(allocated_mib * (low + span * noise))


def is_idle(sm_utilization: float | None) -> bool:
    """True when a minute's utilization counts as idle (or no metric came)."""
    return sm_utilization is None or sm_utilization < IDLE_THRESHOLD_PERCENT
