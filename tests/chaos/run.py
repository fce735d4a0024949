"""One chaos run: start the stack, drive it with client threads while the injector kills things, let it
settle, then check the invariants (manage.py audit: the product's own auditor) and the clients'
bookkeeping, and build the report."""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.faults import FaultInjector, Kill
from tests.chaos.hook import CheckpointHook, HookCall
from tests.chaos.operations import (
    OpRecord,
    World,
    borrow_idle_capacity,
    discover,
    probe_job,
    random_operation,
    restore_cluster,
)
from tests.chaos.seed import HOOK_URL_VARIABLE, PROBE_TENANT
from tests.chaos.stack import Stack, StackConfig

RECOVERY_LIMIT_SECONDS = 10.0
DRAIN_LIMIT_SECONDS = 10.0  # a killed worker's messages all processed again (issue 38)
# the shard queues have a survivor (the standby scheduling worker); the default queue's drain waits for
# the restarted default worker and its sweep backlog: reported, not asserted
DRAIN_ASSERTED = ("worker-scheduling",)
P99_LIMIT_SECONDS = 2.0
WEB_KILL_MARGIN = 2.0  # seconds after a web worker's recovery that a 5xx still counts as "during"
FAULT_SETTLE = 1.0  # seconds after a fault's recovery that still count as "during the fault"


@dataclass
class ChaosConfig:
    database_url: str
    broker_url: str
    ops: int = 1500
    kills: int = 12
    threads: int = 8
    interval: float = 2.0
    warmup: float = 12.0
    seed: int = 1
    quiesce_timeout: float = 45.0
    web_workers: int = 3


@dataclass
class ChaosReport:
    """Everything a run measured; `failures()` lists each broken promise in one line."""

    config: ChaosConfig
    setup_seconds: float = 0.0
    duration: float = 0.0
    records: list[OpRecord] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    injector_errors: list[str] = field(default_factory=list)
    audit: dict[str, Any] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unacknowledged: list[str] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    server_errors_during_web_kill: int = 0
    server_errors_other: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    probe_latencies: list[float] = field(default_factory=list)
    probe_latencies_fault_free: list[float] = field(default_factory=list)
    quiesced_after: float | None = None
    audits_moved: list[str] = field(default_factory=list)
    hook_calls: list[HookCall] = field(default_factory=list)
    fairness: dict[str, int] = field(default_factory=dict)

    # ------------------------------------------------------------------ summaries

    @property
    def violations(self) -> dict[str, int]:
        return {i["name"]: int(i["count"]) for i in self.audit.get("invariants", []) if i["count"]}

    def failures(self) -> list[str]:
        out = [f"invariant {name}: {count} violations" for name, count in self.violations.items()]
        out += [
            f"invariant {i['name']}: check failed: {i['error']}"
            for i in self.audit.get("invariants", [])
            if i.get("error")
        ]
        if not self.audit:
            out.append("the audit did not run")
        for label, items in (
            ("lost (201 but no row)", self.lost),
            ("duplicated", self.duplicated),
            ("created but not acknowledged", self.unacknowledged),
            (
                "accepted but not placed, waiting with a reason or failed with a message",
                self.unexplained,
            ),
            ("no answer after every retry", self.unanswered),
            ("contract broken", self.unexpected),
            ("5xx outside a web-worker kill", self.server_errors_other),
            ("injector error", self.injector_errors),
            ("bad checkpoint-hook call", [c.problem for c in self.hook_calls if c.problem]),
        ):
            if items:
                out.append(f"{label}: {len(items)} (e.g. {items[0]})")
        for kill in self.kills:
            seconds = kill.recovery_seconds
            if seconds is None or seconds > RECOVERY_LIMIT_SECONDS:
                shown = "never" if seconds is None else f"{seconds:.1f}s"
                out.append(f"recovery after {kill.kind} ({kill.target}): {shown}")
            drain = kill.drain_seconds
            if kill.kind in DRAIN_ASSERTED and (drain is None or drain > DRAIN_LIMIT_SECONDS):
                shown = "never" if drain is None else f"{drain:.1f}s"
                out.append(
                    f"drain of the {kill.held} messages {kill.kind} held ({kill.target}): {shown}"
                )
        p99 = percentile(self.probe_latencies_fault_free, 99)
        if p99 is None:
            out.append("no latency probe was placed away from faults")
        elif p99 > P99_LIMIT_SECONDS:
            out.append(f"p99 submit->placed without faults {p99:.2f}s > {P99_LIMIT_SECONDS}s")
        return out

    def format(self) -> str:
        statuses = Counter(
            (r.kind, r.call.status if r.call.status is not None else "none") for r in self.records
        )
        kinds = Counter(k.kind for k in self.kills)
        lines = [
            f"chaos run: {len(self.records)} ops in {self.duration:.0f}s with "
            f"{self.config.threads} client threads, {len(self.kills)} kills (seed {self.config.seed});"
            f" setup {self.setup_seconds:.0f}s",
            "ops by kind and final status:",
        ]
        for kind in sorted({k for k, _ in statuses}):
            answers = ", ".join(
                f"{status}×{n}" for (k, status), n in sorted(statuses.items(), key=str) if k == kind
            )
            lines.append(f"  {kind:<26} {answers}")
        retried = sum(1 for r in self.records if len(r.call.attempts) > 1)
        lines.append(f"calls retried: {retried}")
        refusals = Counter(
            (r.kind, r.call.status, _message(r.call.body))
            for r in self.records
            if r.call.status is not None and 400 <= r.call.status < 500
        )
        if refusals:
            lines.append("most frequent 4xx answers (expected refusals, for reading):")
            for (kind, status, message), n in refusals.most_common(8):
                lines.append(f"  {n:>5} × {kind} {status}: {message}")
        lines.append("kills by kind: " + ", ".join(f"{k}×{n}" for k, n in sorted(kinds.items())))
        lines.append("recovery (seconds from the kill until its component's work resumed):")
        for kill in self.kills:
            seconds = kill.recovery_seconds
            shown = "never" if seconds is None else f"{seconds:.1f}"
            lines.append(f"  {kill.kind:<18} {shown:>6}  {kill.target}")
        recoveries = [k.recovery_seconds for k in self.kills if k.recovery_seconds is not None]
        if recoveries:
            lines.append(
                f"  max {max(recoveries):.1f}s, median {statistics.median(recoveries):.1f}s"
            )
        lines.append(
            "drain (seconds from a worker's SIGKILL until every message it held or had queued "
            "was processed):"
        )
        for kill in (k for k in self.kills if k.held is not None):
            drain = kill.drain_seconds
            shown = "never" if drain is None else f"{drain:.1f}"
            consuming = (
                "never" if kill.consuming_at is None else f"{kill.consuming_at - kill.at:.1f}s"
            )
            lines.append(
                f"  {kill.kind:<18} {shown:>6}  {kill.held} messages, {kill.target},"
                f" the restarted worker consuming after {consuming}"
            )
        drains = [k.drain_seconds for k in self.kills if k.drain_seconds is not None]
        if drains:
            lines.append(f"  max {max(drains):.1f}s, median {statistics.median(drains):.1f}s")
        lines.append(
            f"5xx: {self.server_errors_during_web_kill} during a web-worker kill, "
            f"{len(self.server_errors_other)} otherwise"
        )
        lines.append(
            "submit->placed of the latency probe (a job that always fits): "
            + _latency_text(self.probe_latencies)
            + "; without faults: "
            + _latency_text(self.probe_latencies_fault_free)
        )
        lines.append(
            "submit->first placement of every workload ever placed (includes waiting for capacity): "
            + _latency_text(self.latencies)
        )
        lines.append(fairness_line(self.fairness, self.hook_calls))
        lines.append(
            "quiescence: "
            + (f"{self.quiesced_after:.0f}s" if self.quiesced_after is not None else "not reached")
        )
        if self.audits_moved:
            lines.append(
                "audited again because placements moved while the audit ran: "
                + "; ".join(self.audits_moved)
            )
        lines.append("invariants (manage.py audit after quiescence):")
        for inv in self.audit.get("invariants", []):
            lines.append(f"  {inv['name']:<20} {inv['status']:<9} {inv['count']}")
            for finding in inv.get("findings", [])[:5]:
                lines.append(f"      {json.dumps(finding, sort_keys=True)}")
        failures = self.failures()
        lines.append(f"FAILURES: {len(failures)}" if failures else "OK: every promise held")
        lines.extend(f"  - {failure}" for failure in failures)
        for label, items in (
            ("lost", self.lost),
            ("duplicated", self.duplicated),
            ("created but not acknowledged", self.unacknowledged),
            ("unexplained", self.unexplained),
            ("unanswered", self.unanswered),
            ("5xx outside web kills", self.server_errors_other),
        ):
            for item in items[:10]:
                lines.append(f"  {label}: {item}")
        return "\n".join(lines)


def _message(body: Any) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", ""))[:100]
    return str(body)[:100]


def percentile(values: list[float], p: float) -> float | None:
    """The p-th percentile by nearest rank (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(p / 100 * len(ordered))  # nearest-rank definition
    return ordered[min(len(ordered), max(1, rank)) - 1]


def _latency_text(values: list[float]) -> str:
    if not values:
        return "no placements"
    p50, p99 = percentile(values, 50), percentile(values, 99)
    return f"n={len(values)} p50 {p50:.2f}s p99 {p99:.2f}s"


# ------------------------------------------------------------------------ the run


def _client_loop(
    world: World,
    username: str,
    seed: int,
    records: list[OpRecord],
    lock: threading.Lock,
    stop: threading.Event,
) -> None:
    rng = random.Random(seed)
    actor = world.actor(username)
    while not stop.is_set():
        record = random_operation(world, actor, rng)
        with lock:
            records.append(record)


PROBE_PERIOD = 1.0


def _probe_loop(
    world: World, records: list[OpRecord], lock: threading.Lock, stop: threading.Event
) -> None:
    actor = world.actor(world.probe_username)
    previous: int | None = None
    while not stop.wait(PROBE_PERIOD):
        record, previous = probe_job(world, actor, previous)
        with lock:
            records.append(record)


def quiesce(stack: Stack, timeout: float) -> float | None:
    """Wait until nothing moves: no workload waiting for its first cycle, none PLACED (the simulated
    pods run after 0.5 s), no codespace in a transitional state, no reclaim notice counting down or
    waiting for its delivery, no active placement without its pod, and the state counts unchanged for
    three polls. Returns how long it took, or None at the timeout."""
    started = time.time()
    previous: Any = None
    stable = 0
    while time.time() - started < timeout:
        busy = stack.query(
            "SELECT"
            " (SELECT count(*) FROM scheduling_workload WHERE state = 'pending' AND pending_code = 'queued'),"
            " (SELECT count(*) FROM scheduling_workload WHERE state = 'placed'),"
            " (SELECT count(*) FROM codespaces_codespace"
            "   WHERE state IN ('placed', 'starting', 'stopping', 'deleting')),"
            " (SELECT count(*) FROM quotas_reclaimnotice WHERE state = 'noticed'"
            "   OR signal_state = 'pending' OR hook_state = 'pending'),"
            # a placement whose pod is not made yet (the follow-up task or the reconciler is behind)
            " (SELECT count(*) FROM scheduling_placement p"
            "   JOIN scheduling_workload w ON w.id = p.workload_id"
            "   WHERE p.released_at IS NULL AND w.state IN ('placed', 'running')"
            "   AND NOT EXISTS (SELECT 1 FROM scheduling_simulatedpod s"
            "     WHERE s.workload_id = p.workload_id))"
        )[0]
        counts = stack.query(
            "SELECT state, count(*) FROM scheduling_workload GROUP BY state ORDER BY state"
        )
        signature = (tuple(busy), tuple(counts))
        stable = stable + 1 if signature == previous and not any(busy) else 0
        previous = signature
        if stable >= 3:
            return time.time() - started
        time.sleep(1.0)
    return None


PLACEMENT_MOVES = (
    "SELECT (SELECT coalesce(max(id), 0) FROM scheduling_placement),"
    " (SELECT count(*) FROM scheduling_placement WHERE released_at IS NOT NULL)"
)
"""The newest placement and how many were released: unchanged while nothing was placed or stopped."""
AUDIT_ATTEMPTS = 3


def audit_when_still(
    stack: Stack, report: ChaosReport, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Quiesce, then run `manage.py audit --grace 0`; when a placement was made or released while it
    ran (pending work with a clock keeps the world moving after the clients stop: a gang's timeout
    gives its share to others, a loan's window ends), a grace-0 audit compares a moving target, so
    quiesce and audit again, at most AUDIT_ATTEMPTS times; the last audit stands either way. Every
    audit the world moved under is listed in the report (`audits_moved`)."""
    audited = None
    for attempt in range(AUDIT_ATTEMPTS):
        quiesced = quiesce(stack, timeout)
        if attempt == 0:
            report.quiesced_after = quiesced
        before = stack.query(PLACEMENT_MOVES)
        audited = stack.manage("audit", "--json", "--grace", "0", timeout=120)
        after = stack.query(PLACEMENT_MOVES)
        if before == after:
            break
        report.audits_moved.append(
            f"audit {attempt + 1}: newest placement {before[0][0]} -> {after[0][0]},"
            f" released {before[0][1]} -> {after[0][1]}"
        )
    assert audited is not None
    return audited


def run_chaos(config: ChaosConfig) -> ChaosReport:
    """Run the whole scenario and return its report (the stack is stopped afterwards)."""
    report = ChaosReport(config)
    hook = CheckpointHook()
    hook.start()
    stack = Stack(
        StackConfig(
            config.database_url,
            config.broker_url,
            web_workers=config.web_workers,
            extra_env=fairness_environment(hook),
        )
    )
    started = time.time()
    try:
        seed_data = stack.prepare()
        stack.start()
        report.setup_seconds = time.time() - started
        try:
            _drive(stack, seed_data, config, report)
        finally:
            stack.stop()
    finally:
        hook.stop()
    report.hook_calls = hook.snapshot()
    return report


def fairness_environment(hook: CheckpointHook) -> dict[str, str]:
    """The stack's settings for the fairness features: the harness's hook and its secret, and loan
    expiry and budget checks every few seconds (the production defaults are minutes)."""
    return {
        HOOK_URL_VARIABLE: hook.url,
        "TESSERA_CHECKPOINT_HOOK_SECRET": hook.secret,
        "TESSERA_CHECKPOINT_HOOK_TIMEOUT_SECONDS": "2",
        "TESSERA_QUOTA_LOAN_EXPIRY_SECONDS": "5",
        "TESSERA_QUOTA_BUDGET_CHECK_SECONDS": "10",
    }


FAIRNESS_COUNTS = (
    "SELECT 'notices given', count(*) FROM quotas_reclaimnotice"
    " UNION ALL SELECT 'notices ' || state, count(*) FROM quotas_reclaimnotice GROUP BY state"
    " UNION ALL SELECT 'codespaces suspended', count(*) FROM quotas_reclaimnotice"
    "  WHERE state = 'executed' AND workload_kind = 'codespace'"
    " UNION ALL SELECT 'hooks ' || hook_state, count(*) FROM quotas_reclaimnotice GROUP BY hook_state"
    " UNION ALL SELECT 'loans requested', count(*) FROM quotas_quotaloan"
    " UNION ALL SELECT 'loans ever approved', count(*) FROM quotas_quotaloan WHERE decided_at IS NOT NULL"
    "  AND state IN ('approved', 'expired')"
    " UNION ALL SELECT 'loans expired after approval', count(*) FROM quotas_quotaloan"
    "  WHERE state = 'expired' AND decided_at IS NOT NULL"
    " UNION ALL SELECT 'loans ' || state, count(*) FROM quotas_quotaloan GROUP BY state"
    " UNION ALL SELECT 'budget alerts ' || threshold, count(*) FROM quotas_budgetalert"
    "  GROUP BY threshold"
    " UNION ALL SELECT 'budget top-ups', count(*) FROM quotas_budgettopup"
    " UNION ALL SELECT 'user-cap changes', count(*) FROM quotas_quotachange WHERE subject = 'user_cap'"
)
"""What the run did with the fairness features, from the database after the run (for the report)."""

BUDGET_STOPPED = "SELECT id FROM scheduling_workload WHERE pending_code = 'budget_exhausted'"
"""Workloads waiting now because their quota's GPU-hour budget ran out (admission's code)."""


def _watch_budget_stops(
    stack: Stack, seen: set[int], stop: threading.Event, every: float = 1.0
) -> None:
    """Collect every workload seen waiting on an exhausted budget while the run lasts (the database
    keeps only the latest pending code). A poll that fails (a database-session kill) is skipped."""
    while not stop.wait(every):
        try:
            seen.update(int(row[0]) for row in stack.query(BUDGET_STOPPED))
        except Exception:  # noqa: BLE001 (psycopg errors of a killed session; the next poll retries)
            continue


def fairness_line(fairness: dict[str, int], hook_calls: list[HookCall]) -> str:
    """One line of what the fairness features did in the run (0 where nothing happened)."""

    def n(name: str) -> int:
        return int(fairness.get(name, 0))

    hooks = ", ".join(
        f"{k.removeprefix('hooks ')} {v}"
        for k, v in sorted(fairness.items())
        if k.startswith("hooks ")
    )
    alerts = ", ".join(
        f"{k.removeprefix('budget alerts ')}% {v}"
        for k, v in sorted(fairness.items())
        if k.startswith("budget alerts ")
    )
    closed = n("notices executed") + n("notices cancelled")
    return (
        f"fairness features exercised: reclaim notices given {n('notices given')}, closed {closed}"
        f" (executed {n('notices executed')}, cancelled {n('notices cancelled')}),"
        f" open {n('notices noticed')}; codespaces suspended {n('codespaces suspended')};"
        f" checkpoint-hook POSTs received {len(hook_calls)}"
        f" ({sum(1 for c in hook_calls if c.problem)} bad; notices' hook states: {hooks or 'none'});"
        f" loans requested {n('loans requested')}, approved {n('loans ever approved')},"
        f" expired {n('loans expired')} (after approval {n('loans expired after approval')}),"
        f" declined {n('loans declined')}, cancelled {n('loans cancelled')};"
        f" budget alerts {alerts or 'none'}, workloads stopped by an exhausted budget"
        f" {n('budget stops')}, top-ups {n('budget top-ups')}; user-cap changes"
        f" {n('user-cap changes')}"
    )


def _drive(
    stack: Stack, seed_data: dict[str, Any], config: ChaosConfig, report: ChaosReport
) -> None:
    world = discover(stack.base_url, seed_data)
    usernames = world.client_usernames()
    records: list[OpRecord] = borrow_idle_capacity(world)
    lock = threading.Lock()
    stop = threading.Event()
    injector = FaultInjector(
        stack, config.kills, config.interval, seed=config.seed, warmup=config.warmup
    )
    started = time.time()
    threads = [
        threading.Thread(
            target=_client_loop,
            args=(
                world,
                usernames[i % len(usernames)],
                config.seed * 1000 + i,
                records,
                lock,
                stop,
            ),
            daemon=True,
        )
        for i in range(config.threads)
    ]
    threads.append(
        threading.Thread(target=_probe_loop, args=(world, records, lock, stop), daemon=True)
    )
    budget_stops: set[int] = set()
    watching = threading.Event()
    watcher = threading.Thread(
        target=_watch_budget_stops, args=(stack, budget_stops, watching), daemon=True
    )
    injector_thread = threading.Thread(target=injector.run, daemon=True)
    injector_thread.start()
    watcher.start()
    for thread in threads:
        thread.start()
    while not (
        sum(1 for r in records if r.kind != "probe.submit") >= config.ops and injector.done.is_set()
    ):
        time.sleep(0.2)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    injector.stop_requested.set()
    injector_thread.join(timeout=90)
    report.duration = time.time() - started
    records.extend(restore_cluster(world))
    stack.ensure_running()
    report.records = records
    report.kills = injector.history
    report.injector_errors = injector.errors
    audited = audit_when_still(stack, report, config.quiesce_timeout)
    watching.set()
    watcher.join(timeout=10)
    try:
        report.audit = json.loads(audited.stdout)
    except ValueError:
        report.injector_errors.append(f"manage.py audit printed no JSON: {audited.stderr[-1000:]}")
    _check_requests(stack, report)
    _check_latency(stack, report)
    report.fairness = {str(name): int(count) for name, count in stack.query(FAIRNESS_COUNTS)}
    report.fairness["budget stops"] = len(budget_stops)


def server_error_lines(records: list[OpRecord], kills: list[Kill]) -> tuple[int, list[str]]:
    """How many 5xx attempts overlapped a web-worker kill (from 0.5 s before it until WEB_KILL_MARGIN
    after its recovery), and one line for each other one, naming the fault just before its answer."""
    windows = [
        (k.at - 0.5, (k.recovered_at or k.at + 30) + WEB_KILL_MARGIN)
        for k in kills
        if k.kind == "web-worker"
    ]
    during = 0
    lines = []
    for record in records:
        call = record.call
        for attempt in call.server_errors:
            answered = attempt.done or attempt.at
            if any(start <= answered and attempt.at <= end for start, end in windows):
                during += 1
                continue
            final = f"{call.status} {call.error_code}".strip()
            lines.append(
                f"{record.kind} {call.method} {call.path} -> {attempt.status} "
                f"{_last_fault(kills, answered)}: {attempt.error[:160]} (final answer {final})"
            )
    return during, lines


def _last_fault(kills: list[Kill], at: float) -> str:
    before = [k for k in kills if k.at <= at]
    if not before:
        return "(before any fault)"
    last = before[-1]
    return f"({at - last.at:.1f}s after {last.kind} {last.target})"


def _check_requests(stack: Stack, report: ChaosReport) -> None:
    """Lost, duplicated, unacknowledged, unexplained and unanswered requests; 5xx by window."""
    report.server_errors_during_web_kill, report.server_errors_other = server_error_lines(
        report.records, report.kills
    )
    for record in report.records:
        call = record.call
        if call.status is None:
            errors = ", ".join(sorted({a.error for a in call.attempts}))
            report.unanswered.append(f"{record.kind} {call.method} {call.path}: {errors}")
        if record.unexpected:
            report.unexpected.append(f"{record.kind}: {record.unexpected}")

    created_names = {
        kind: {r.name: r for r in report.records if r.kind == kind and r.name}
        for kind in ("codespace.create", "job.submit", "probe.submit")
    }
    tables = {
        "codespace.create": (
            # A codespace's reasons are its workload's (codespaces.phase.observe derives them).
            "SELECT c.name, array_agg(c.id), array_agg(c.state),"
            " array_agg(COALESCE(w.pending_reason, '')), array_agg(COALESCE(w.failure_reason, ''))"
            " FROM codespaces_codespace c LEFT JOIN scheduling_workload w ON w.id = c.workload_id"
            " WHERE c.name = ANY(%s) GROUP BY c.name"
        ),
        "job.submit": (
            "SELECT name, array_agg(id), array_agg(state), array_agg(reason), array_agg(reason)"
            " FROM scheduling_gang WHERE name = ANY(%s) GROUP BY name"
        ),
    }
    tables["probe.submit"] = tables["job.submit"]
    for kind, by_name in created_names.items():
        rows = (
            {row[0]: row for row in stack.query(tables[kind], (sorted(by_name),))}
            if by_name
            else {}
        )
        for name, record in sorted(by_name.items()):
            row = rows.get(name)
            accepted = record.created is not None
            if accepted and row is None:
                report.lost.append(f"{kind} {name}: answered 201 (id {record.created}), no row")
                continue
            if row is None:
                continue
            ids, states, pending, failures = row[1], row[2], row[3], row[4]
            if len(ids) > 1:
                report.duplicated.append(f"{kind} {name}: {len(ids)} rows {sorted(ids)}")
            if not accepted:
                report.unacknowledged.append(
                    f"{kind} {name}: row {ids[0]} ({states[0]}) exists but the client got "
                    f"{record.call.status} {record.call.error_code or ''}".rstrip()
                )
            state = states[0]
            if state in ("queued", "waiting") and not pending[0]:
                report.unexplained.append(f"{kind} {name}: {state} without a reason")
            if state in ("failed", "timed_out", "cancelled") and not failures[0]:
                report.unexplained.append(f"{kind} {name}: {state} without a message")


def _check_latency(stack: Stack, report: ChaosReport) -> None:
    """submit->first placement, from the database: of the latency probe's jobs (overall and those
    submitted outside every fault window) and, for reading, of every workload."""
    rows = stack.query(
        "SELECT t.slug = %s, extract(epoch FROM w.submitted_at), extract(epoch FROM min(p.created_at))"
        " FROM scheduling_workload w JOIN scheduling_placement p ON p.workload_id = w.id"
        " JOIN portal_tenant t ON t.id = w.tenant_id"
        " GROUP BY w.id, w.submitted_at, t.slug",
        (PROBE_TENANT,),
    )
    windows = fault_windows(report.kills)
    for is_probe, submitted, placed in rows:
        latency = float(placed) - float(submitted)
        report.latencies.append(latency)
        if not is_probe:
            continue
        report.probe_latencies.append(latency)
        if not any(start <= float(submitted) <= end for start, end in windows):
            report.probe_latencies_fault_free.append(latency)


def fault_windows(kills: list[Kill]) -> list[tuple[float, float]]:
    """[kill, recovery + FAULT_SETTLE] of every fault (a fault never recovered lasts 60 s)."""
    return [(k.at, (k.recovered_at or k.at + 60.0) + FAULT_SETTLE) for k in kills]


def config_from_environment(**overrides: Any) -> ChaosConfig:
    """ChaosConfig from TESSERA_CHAOS_DATABASE_URL and TESSERA_CHAOS_BROKER_URL (plus overrides)."""
    return ChaosConfig(
        database_url=os.environ["TESSERA_CHAOS_DATABASE_URL"],
        broker_url=os.environ.get(
            "TESSERA_CHAOS_BROKER_URL", os.environ.get("TESSERA_TEST_BROKER_URL", "")
        ),
        **overrides,
    )
