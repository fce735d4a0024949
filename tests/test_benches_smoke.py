"""Every benchmark in bench/ runs, in a smoke size, so none can rot unnoticed (issue 38 #17: bench/dashboards.py
crashed on a column added after it was last run).

Each bench is found by enumerating bench/ (a module with a `main` run under `__main__`), so a new bench
without a smoke size here fails `test_every_bench_has_a_smoke_size`, naming it. Each smoke run is a
subprocess (`python -m bench.NAME ...`) that must exit 0 and print its figures: the ratios against the
baseline it measures in the same run. Benches that need PostgreSQL, a broker (Redis, a real worker) or
the shared openb trace skip with the suite's usual reasons when those are missing (tests/skip_summary.py
reports them), or fail under CI's TESSERA_REQUIRE_BROKER=1 / TESSERA_REQUIRE_TRACES=1; CI has them all,
so CI runs every bench. The figures of a smoke run mean nothing: only that the bench still works.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest

from scheduling.tests.traces import NODE_LIST, TOOL, TRACE_DIR, pod_list, require_traces
from tests.integration.fixtures import require_broker

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RATIO = r"[0-9.]+ ?[x×]"


@dataclass(frozen=True)
class Smoke:
    """How to run one bench in a few seconds: its arguments, what it needs, what its figures look like."""

    argv: tuple[str, ...]
    figures: str
    """A regular expression its output must match (the ratio line)."""
    needs: frozenset[str] = frozenset()
    """Of "postgres", "broker", "traces"."""
    database: str = ""
    """The PostgreSQL database it (re)creates, passed as --database-url."""
    timeout: float = 120.0


def _traces() -> tuple[str, ...]:
    return ("--trace-dir", str(TRACE_DIR))


SMOKES: dict[str, Smoke] = {
    "api": Smoke(
        (
            "--duration",
            "1",
            "--repeat",
            "1",
            "--rows",
            "2",
            "--connections",
            "2",
            "--loadgen",
            "python",
            "--only",
            "me",
        ),
        r"me\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+0\s+[0-9.]+",
        frozenset({"postgres", "broker"}),
        database="tessera_smoke_api",
    ),  # fmt: skip
    "api_cost": Smoke(
        ("--requests", "10", "--rows", "2"),
        r"list\s+[0-9.]+\s+\S+\s+[0-9.]+\s+[0-9.]+",
        frozenset({"postgres", "broker"}),
        database="tessera_smoke_api_cost",
    ),
    "dashboards": Smoke(
        ("--smoke",),
        r"overview data 24h\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+",
        frozenset({"postgres"}),
        database="tessera_smoke_dashboards",
    ),
    "defrag": Smoke(
        (
            *_traces(),
            "--traces",
            "default",
            "--loads",
            "0.7",
            "--budgets",
            "0,1",
            "--nodes",
            "40",
            "--pods",
            "300",
            "--hours",
            "0.2",
        ),
        r"whole-GPU wait.*→\s+[0-9.]+ \([0-9.]+\)",
        frozenset({"traces"}),
    ),  # fmt: skip
    "dynamic": Smoke(
        (
            *_traces(),
            "--traces",
            "default",
            "--policies",
            "tessera,firstfit",
            "--jobs",
            "1",
            "--nodes",
            "40",
            "--pods",
            "300",
            "--hours",
            "0.2",
            "--probes",
            "1",
        ),
        r"default\s+firstfit\s+[0-9.]+.*ETA coverage: \d+/\d+",
        frozenset({"traces"}),
    ),  # fmt: skip
    "mig": Smoke(
        (
            *_traces(),
            "--traces",
            "default",
            "--seeds",
            "42",
            "--churn-traces",
            "default",
            "--nodes",
            "40",
            "--pods",
            "300",
        ),
        rf"packing / first-fit: alloc@100% {RATIO}",
        frozenset({"traces"}),
    ),  # fmt: skip
    "reclaim": Smoke(
        ("--nodes", "10", "--pods", "4", "--repeat", "1"),
        rf"node by node / by share: {RATIO}",
    ),
    "replay": Smoke(
        (
            *_traces(),
            "--traces",
            "default",
            "--policies",
            "tessera,firstfit",
            "--seeds",
            "42",
            "--jobs",
            "1",
            "--no-speed",
            "--fill-sizes",
            "",
            "--nodes",
            "40",
            "--pods",
            "600",
        ),
        r"tessera\s+vs published FGD @100: mean [+-][0-9.]+",
        frozenset({"traces"}),
    ),  # fmt: skip
    "scale": Smoke(
        ("--nodes", "10", "--timeout", "60"),
        rf"placed .* {RATIO}",
        frozenset({"postgres"}),
        database="tessera_smoke_scale",
    ),
    "service": Smoke(
        (
            "--nodes",
            "10",
            "--batch",
            "20",
            "--baseline",
            "5",
            "--rate",
            "10",
            "--duration",
            "2",
            "--submitters",
            "1",
            "--timeout",
            "60",
        ),
        rf"ratio batched / one-per-cycle: {RATIO}",
        frozenset({"postgres", "broker"}),
        database="tessera_smoke_service",
    ),  # fmt: skip
    "topology": Smoke(
        ("--blocks", "1", "--racks", "2", "--nodes", "2", "--arrivals", "30", "--seeds", "1"),
        rf"GPU utilisation %.*{RATIO}",
    ),
}


def benches() -> list[str]:
    """Every module of bench/ that runs as a program (a `main` called under `__main__`)."""
    found = []
    for path in sorted(BENCH.glob("*.py")):
        tree = ast.parse(path.read_text())
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        runs = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
        if "main" in functions and runs:
            found.append(path.stem)
    return found


def test_every_bench_has_a_smoke_size() -> None:
    found = benches()
    assert "dashboards" in found
    missing = sorted(set(found) - set(SMOKES))
    assert missing == [], f"benches without a smoke size in {__name__}: {missing}"
    assert sorted(set(SMOKES) - set(found)) == []


def postgres_url(database: str) -> str:
    """A URL of `database` on the PostgreSQL server the tests use (DATABASE_URL), or a skip."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        pytest.skip("bench smoke run needs PostgreSQL (DATABASE_URL unset or not postgres://)")
    return urlparse(url)._replace(path=f"/{database}").geturl()


def redis_url(db: int) -> str:
    """The test broker's Redis with another db number (the benches flush their own)."""
    return urlparse(require_broker())._replace(path=f"/{db}").geturl()


def argv_for(name: str, smoke: Smoke) -> list[str]:
    argv = list(smoke.argv)
    if "traces" in smoke.needs:
        require_traces(NODE_LIST, TOOL, pod_list("default"))
    if "broker" in smoke.needs:
        if name == "service":
            argv += ["--broker-url", redis_url(3), "--cache-url", redis_url(4)]
        elif name == "api":
            argv += ["--broker", redis_url(5)]
        else:
            argv += ["--redis", redis_url(5)]
    if "postgres" in smoke.needs:
        argv += ["--database-url", postgres_url(smoke.database)]
    return argv


@pytest.mark.parametrize("name", sorted(SMOKES))
def test_bench_runs_in_smoke_size_and_prints_its_figures(name: str, tmp_path: Path) -> None:
    smoke = SMOKES[name]
    argv = argv_for(name, smoke)
    env = {
        **os.environ,
        "TESSERA_VAR_DIR": str(tmp_path / "var"),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    env.pop("DATABASE_URL", None)  # each bench sets its own (never the test database)
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=smoke.timeout,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"bench.{name} exited {done.returncode}:\n{output[-3000:]}"
    assert re.search(smoke.figures, done.stdout, re.S), (
        f"bench.{name} printed:\n{done.stdout[-3000:]}"
    )
