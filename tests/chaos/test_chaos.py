"""The bounded chaos run (marked `chaos`): about 1,500 operations and 12 faults against the whole stack,
then every promise is asserted. Needs TESSERA_CHAOS_DATABASE_URL (PostgreSQL; the database is dropped
and created again, so its name must contain "chaos") and TESSERA_CHAOS_BROKER_URL (a Redis db that is
flushed); skipped with the reason otherwise, a failure instead under TESSERA_REQUIRE_CHAOS=1.
TESSERA_CHAOS_OPS and TESSERA_CHAOS_KILLS change the size (default 1500 and 12).
The long form: `python -m tests.chaos --ops 10000 --kills 100`."""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlparse

import pytest

from tests.chaos.faults import KINDS
from tests.chaos.run import ChaosReport, config_from_environment, run_chaos

pytestmark = pytest.mark.chaos

BOUNDED = {
    "ops": int(os.environ.get("TESSERA_CHAOS_OPS", "1500")),
    "kills": int(os.environ.get("TESSERA_CHAOS_KILLS", "12")),
    "threads": 8, "interval": 1.0, "warmup": 12.0, "quiesce_timeout": 45.0,
}  # fmt: skip


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=1
        ):
            return True
    except OSError:
        return False


def _missing() -> str:
    database = os.environ.get("TESSERA_CHAOS_DATABASE_URL", "")
    broker = os.environ.get("TESSERA_CHAOS_BROKER_URL", "")
    if not database.startswith("postgres"):
        return "the chaos suite needs TESSERA_CHAOS_DATABASE_URL (a PostgreSQL database it may recreate)"
    if not broker.startswith("redis"):
        return "the chaos suite needs TESSERA_CHAOS_BROKER_URL (a Redis db it may flush)"
    if not _reachable(database, 5432):
        return f"nothing answers at {database} (TESSERA_CHAOS_DATABASE_URL)"
    if not _reachable(broker, 6379):
        return f"nothing answers at {broker} (TESSERA_CHAOS_BROKER_URL)"
    return ""


@pytest.fixture(scope="module")
def report() -> ChaosReport:
    missing = _missing()
    if missing:
        if os.environ.get("TESSERA_REQUIRE_CHAOS") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    result = run_chaos(config_from_environment(**BOUNDED))
    sys.stderr.write("\n" + result.format() + "\n")
    return result


def test_bounded_run_did_the_work_it_was_asked_for(report: ChaosReport) -> None:
    assert len(report.records) >= BOUNDED["ops"]
    assert len(report.kills) == BOUNDED["kills"]
    if BOUNDED["kills"] >= len(KINDS):
        assert {k.kind for k in report.kills} == set(KINDS)
    assert report.audit, "manage.py audit must have produced its JSON report"
    # the fairness features were exercised (each was in every bounded run so far; codespace
    # suspensions and the soft budget's 100 % are not yet reliable, so only reported)
    exercised = {
        "reclaim notices": report.fairness.get("notices given", 0),
        "checkpoint-hook POSTs": len(report.hook_calls),
        "approved loans expired": report.fairness.get("loans expired after approval", 0),
        "budget stops": report.fairness.get("budget stops", 0),
        "top-ups": report.fairness.get("budget top-ups", 0),
        "user-cap changes": report.fairness.get("user-cap changes", 0),
    }
    assert [name for name, count in exercised.items() if count == 0] == [], report.format()


def test_every_invariant_holds_after_the_run(report: ChaosReport) -> None:
    assert report.violations == {}, report.format()


def test_no_request_was_lost_duplicated_or_left_unexplained(report: ChaosReport) -> None:
    assert (report.lost, report.duplicated, report.unacknowledged, report.unexplained) == (
        [], [], [], []
    ), report.format()  # fmt: skip
    assert report.unanswered == [], report.format()


def test_no_server_error_outside_a_web_worker_kill(report: ChaosReport) -> None:
    assert report.server_errors_other == [], report.format()


def test_every_component_recovers_within_ten_seconds(report: ChaosReport) -> None:
    slow = [
        (k.kind, k.recovery_seconds)
        for k in report.kills
        if k.recovery_seconds is None or k.recovery_seconds > 10.0
    ]
    assert slow == [], report.format()


def test_the_work_a_killed_scheduling_worker_held_is_processed_within_ten_seconds(
    report: ChaosReport,
) -> None:
    worker_kills = [k for k in report.kills if k.kind == "worker-scheduling"]
    assert worker_kills, "the run killed no scheduling worker"
    slow = [
        (k.kind, k.held, k.drain_seconds)
        for k in worker_kills
        if k.drain_seconds is None or k.drain_seconds > 10.0
    ]
    assert slow == [], report.format()


def test_every_failure_is_reported(report: ChaosReport) -> None:
    # the report is the suite's one verdict: each failing test above also appears in it
    assert report.failures() == [], report.format()
