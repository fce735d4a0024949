"""The chaos report's verdict, without the stack: which 5xx, recoveries, latencies, hook calls and API
answers break a promise, and how the fairness features' activity is shown."""

from __future__ import annotations

from tests.chaos.client import Attempt, Call
from tests.chaos.faults import Kill
from tests.chaos.hook import HookCall
from tests.chaos.operations import OpRecord, expect_answer
from tests.chaos.run import (
    ChaosConfig,
    ChaosReport,
    fairness_line,
    fault_windows,
    percentile,
    server_error_lines,
)

CLEAN_AUDIT = {"invariants": [{"name": "gpu_compute", "status": "ok", "count": 0, "error": ""}]}


def report(**fields: object) -> ChaosReport:
    result = ChaosReport(ChaosConfig(database_url="postgres://x/chaos", broker_url="redis://x/1"))
    result.audit = dict(CLEAN_AUDIT)
    for name, value in fields.items():
        setattr(result, name, value)
    return result


def call_with_5xx_at(at: float) -> OpRecord:
    call = Call("POST", "codespaces/", started=at, status=201)
    call.attempts = [Attempt(at, 500, "boom", at + 0.2), Attempt(at + 0.5, 201, "", at + 0.6)]
    return OpRecord("codespace.create", "alice", call)


def test_a_clean_run_has_no_failures() -> None:
    clean = report(
        kills=[Kill("beat", 100.0, recovered_at=103.0)], probe_latencies_fault_free=[0.1]
    )
    assert clean.failures() == []
    assert "OK: every promise held" in clean.format()


def test_violations_and_failed_checks_are_failures() -> None:
    audit = {
        "invariants": [
            {"name": "quota_usage", "status": "violated", "count": 6, "error": ""},
            {"name": "gang_whole", "status": "error", "count": 0, "error": "ValueError: x"},
        ]
    }
    broken = report(audit=audit, probe_latencies_fault_free=[0.1])
    assert broken.failures() == [
        "invariant quota_usage: 6 violations",
        "invariant gang_whole: check failed: ValueError: x",
    ]


def test_a_5xx_counts_only_outside_a_web_worker_kill() -> None:
    kills = [Kill("web-worker", 100.0, "gunicorn worker 7", recovered_at=101.0)]
    during, outside = call_with_5xx_at(100.5), call_with_5xx_at(150.0)
    inside_count, lines = server_error_lines([during, outside], kills)
    assert inside_count == 1
    assert len(lines) == 1
    assert "50.2s after web-worker gunicorn worker 7" in lines[0]
    assert "(final answer 201)" in lines[0]


def test_slow_or_missing_recovery_is_a_failure() -> None:
    kills = [
        Kill("worker-default", 10.0, "w", recovered_at=15.0),
        Kill("beat", 20.0, "b", recovered_at=31.0),
        Kill("db-session", 40.0, "s"),
    ]
    assert report(kills=kills, probe_latencies_fault_free=[0.1]).failures() == [
        "recovery after beat (b): 11.0s",
        "recovery after db-session (s): never",
    ]


def test_a_scheduling_worker_whose_held_messages_drain_slowly_or_never_is_a_failure() -> None:
    kills = [
        Kill("worker-scheduling", 10.0, "s1", recovered_at=12.0, held=3, drained_at=19.5),
        Kill("worker-scheduling", 30.0, "s2", recovered_at=32.0, held=4, drained_at=41.0),
        Kill("worker-default", 50.0, "d", recovered_at=52.0, held=2),
        Kill("beat", 70.0, "b", recovered_at=71.0),
    ]
    kills.append(Kill("worker-scheduling", 90.0, "s3", recovered_at=91.0, held=1))
    # the default queue's drain is reported, not asserted (it waits for the restarted worker)
    assert report(kills=kills, probe_latencies_fault_free=[0.1]).failures() == [
        "drain of the 4 messages worker-scheduling held (s2): 11.0s",
        "drain of the 1 messages worker-scheduling held (s3): never",
    ]


def test_probe_p99_above_two_seconds_without_faults_is_a_failure() -> None:
    slow = report(probe_latencies_fault_free=[0.1] * 98 + [2.5, 3.0])
    assert slow.failures() == ["p99 submit->placed without faults 2.50s > 2.0s"]
    assert report(probe_latencies_fault_free=[]).failures() == [
        "no latency probe was placed away from faults"
    ]


def test_fault_windows_last_until_one_second_after_recovery() -> None:
    assert fault_windows([Kill("beat", 10.0, recovered_at=12.0), Kill("beat", 50.0)]) == [
        (10.0, 13.0),
        (50.0, 111.0),
    ]


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 99) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0


def test_the_fairness_line_says_what_each_feature_did() -> None:
    counts = {
        "notices given": 7,
        "notices executed": 4,
        "notices cancelled": 2,
        "notices noticed": 1,
        "codespaces suspended": 3,
        "hooks sent": 5,
        "hooks none": 2,
        "loans requested": 9,
        "loans ever approved": 4,
        "loans approved": 1,
        "loans expired": 5,
        "loans expired after approval": 3,
        "loans declined": 1,
        "budget alerts 80": 1,
        "budget alerts 100": 2,
        "budget stops": 6,
        "budget top-ups": 8,
        "user-cap changes": 10,
    }
    hook_calls = [HookCall(1.0, 1, 2), HookCall(2.0, None, None, "bad or missing signature")]
    assert fairness_line(counts, hook_calls) == (
        "fairness features exercised: reclaim notices given 7, closed 6 (executed 4, cancelled 2),"
        " open 1; codespaces suspended 3; checkpoint-hook POSTs received 2 (1 bad; notices' hook"
        " states: none 2, sent 5); loans requested 9, approved 4, expired 5 (after approval 3),"
        " declined 1, cancelled 0; budget alerts 100% 2, 80% 1, workloads stopped by an exhausted"
        " budget 6, top-ups 8; user-cap changes 10"
    )


def test_a_bad_checkpoint_hook_call_is_a_failure() -> None:
    bad = report(
        hook_calls=[HookCall(1.0, None, None, "bad or missing signature")],
        probe_latencies_fault_free=[0.1],
    )
    assert bad.failures() == ["bad checkpoint-hook call: 1 (e.g. bad or missing signature)"]


def answered(status: int, fields: dict[str, list[str]] | None = None) -> OpRecord:
    call = Call("POST", "quota-loans/", started=1.0, status=status)
    call.body = {"error": {"code": "invalid", "message": "m", "fields": fields or {}}}
    return OpRecord("loan.request", "alice", call)


def test_a_refusal_the_operation_does_not_promise_is_unexpected() -> None:
    allowed: dict[int, str | None] = {201: None, 400: "gpus"}
    assert expect_answer(answered(201), allowed).unexpected == ""
    assert expect_answer(answered(400, {"gpus": ["x"]}), allowed).unexpected == ""
    assert expect_answer(answered(400, {"ends_at": ["x"]}), allowed).unexpected == (
        "POST quota-loans/ answered 400 naming ['ends_at'], not gpus"
    )
    assert expect_answer(answered(403), allowed).unexpected == (
        "POST quota-loans/ answered 403 invalid, expected [201, 400]"
    )
    unanswered = OpRecord("loan.request", "alice", Call("POST", "quota-loans/", started=1.0))
    assert expect_answer(unanswered, allowed).unexpected == ""  # the "no answer" check judges it


def test_an_audit_the_placements_moved_under_is_shown_and_is_not_a_failure_by_itself() -> None:
    moved = report(audits_moved=["audit 1: newest placement 5 -> 7, released 2 -> 2"])
    moved.probe_latencies_fault_free = [0.1]
    assert moved.failures() == []
    assert (
        "audited again because placements moved while the audit ran: audit 1: newest placement"
        " 5 -> 7, released 2 -> 2"
    ) in moved.format()
