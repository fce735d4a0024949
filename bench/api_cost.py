"""CPU per API request, measured in-process: the web tier's Python and PostgreSQL's backend, per scenario.

    .venv/bin/python bench/api_cost.py [--requests 1500] [--json out.json]

`bench/api.py` measures throughput through gunicorn and wrk; on a shared VM whose speed drifts by +-15 %
between runs its req/s move more than most changes do. This bench takes the load generator, the HTTP
server and the other worker out: it calls Django's WSGI handler directly, one request at a time, on the
same seeded database and settings as `bench/api.py` (Redis cache and rate counters, prepared
statements), and reports per request:
- `python ms`: this process's CPU (Django, DRF, the views, psycopg and redis clients);
- `pg ms`: the CPU of this connection's PostgreSQL backend, read from /proc (needs PostgreSQL on this
  host and permission to read its processes; "n/a" otherwise);
- the ratio of their sum to the baseline's (`GET /bench/ping/`, no database) measured in the same run;
- `wall ms`: the request's elapsed time (CPU plus the waits for PostgreSQL, round trips included).

Scenarios as in `bench/api.py`: baseline, me, list (`?limit=20`) and submit (a CPU codespace with an
Idempotency-Key, 64 engineers in rotation). Each runs a warm-up, then `--requests` measured requests.

`--off compiled,pipeline,insert` switches pieces of the private query layer off for the run (one process
each, the baseline measured in the same process), to state what each one buys (docs/architecture.md):
- `compiled`: every `portal.compiled_query.CompiledQuerySet` shape is evaluated by the plain ORM;
- `pipeline`: `portal.db` sends one statement per round trip (no psycopg pipeline mode, COMMIT alone);
- `insert`: `portal.db.insert` goes through `Model.save()` (a no-op pre_save receiver makes it do so).
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import prepare_database, server_environ, submit_body  # noqa: E402

SCENARIOS = ("baseline", "me", "list", "submit")
PIECES = ("compiled", "pipeline", "insert")


def switch_off(pieces: set[str]) -> None:
    """Runs inside Django: turn the named pieces of the private query layer off (see the docstring)."""
    from contextlib import contextmanager

    from django.db.models import signals

    from portal import compiled_query, db

    if "compiled" in pieces:
        compiled_query.CompiledQuerySet._statement = lambda self: None  # type: ignore[method-assign,assignment]
    if "pipeline" in pieces:

        @contextmanager
        def one_by_one(connection: Any) -> Any:
            connection.ensure_connection()
            with connection.wrap_database_errors:
                yield

        db._psycopg_pipeline = one_by_one  # type: ignore[assignment]
    if "insert" in pieces:

        def plain_save(sender: Any, **kwargs: Any) -> None:
            """A pre_save receiver: `portal.db.insert` then saves through the ORM."""

        signals.pre_save.connect(plain_save, weak=False, dispatch_uid="bench-plain-insert")


def _environ(method: str, path: str, query: str, token: str | None, body: bytes) -> dict[str, Any]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
    }
    if token:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    if body:
        environ["CONTENT_TYPE"] = "application/json"
        environ["CONTENT_LENGTH"] = str(len(body))
    return environ


def _backend_cpu_seconds(pid: int) -> float | None:
    """utime + stime of one PostgreSQL backend (Linux /proc), or None where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(requests: int, tokens: list[str]) -> dict[str, dict[str, Any]]:
    """Runs inside Django (bench settings): every scenario, warm-up then `requests` measured."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import connection

    app = WSGIHandler()
    run = str(int(time.time()))
    counter = itertools.count()

    def request(scenario: str) -> Callable[[], None]:
        def call() -> None:
            i = next(counter)
            token = tokens[i % len(tokens)]
            if scenario == "baseline":
                environ = _environ("GET", "/bench/ping/", "", None, b"")
            elif scenario == "me":
                environ = _environ("GET", "/api/v1/me/", "", token, b"")
            elif scenario == "list":
                environ = _environ("GET", "/api/v1/codespaces/", "limit=20", token, b"")
            else:
                name = f"c{run}-{i}"
                body = submit_body(name).encode()
                environ = _environ("POST", "/api/v1/codespaces/", "", token, body)
                environ["HTTP_IDEMPOTENCY_KEY"] = name
            status: list[str] = []

            def start_response(line: str, headers: Any, *exc_info: Any) -> Any:
                status.append(line)

            response = app(environ, start_response)
            b"".join(response)
            response.close()  # type: ignore[attr-defined]
            if not status[0].startswith("2"):
                raise SystemExit(f"{scenario}: {status[0]}")

        return call

    results: dict[str, dict[str, Any]] = {}
    for scenario in SCENARIOS:
        call = request(scenario)
        for _ in range(200):
            call()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = int(cursor.fetchone()[0])
        pg_before = _backend_cpu_seconds(backend)
        wall_before = time.perf_counter()
        cpu_before = time.process_time()
        for _ in range(requests):
            call()
        python_ms = (time.process_time() - cpu_before) * 1000 / requests
        wall_ms = (time.perf_counter() - wall_before) * 1000 / requests
        pg_after = _backend_cpu_seconds(backend)
        pg_ms = None
        if pg_before is not None and pg_after is not None:
            pg_ms = (pg_after - pg_before) * 1000 / requests
        results[scenario] = {"python_ms": python_ms, "pg_ms": pg_ms, "wall_ms": wall_ms}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/tessera_bench_cost"
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--requests", type=int, default=1500, help="measured requests per scenario")
    parser.add_argument("--rows", type=int, default=200, help="codespaces per team before the run")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--off", default="", help=f"comma-separated pieces to switch off: {','.join(PIECES)}"
    )
    args = parser.parse_args(argv)
    off = set(filter(None, args.off.split(",")))
    if off - set(PIECES):
        parser.error(f"--off: unknown pieces {sorted(off - set(PIECES))}; known: {PIECES}")
    requests = max(10, min(args.requests, 20000))  # 10: the smoke run (tests/test_benches_smoke.py)
    var_dir = Path(tempfile.mkdtemp(prefix="tessera-bench-cost-"))
    os.environ.update(server_environ(args.database_url, args.redis, args.redis, var_dir))
    # the submit scenario needs room: (warm-up + requests) creates over 64 engineers
    per_user = (200 + requests) // 64 + 10
    tokens = prepare_database(args.database_url, dict(os.environ), args.rows, per_user)

    import django

    django.setup()
    switch_off(off)
    results = measure(requests, tokens)
    base = results["baseline"]["python_ms"] + (results["baseline"]["pg_ms"] or 0)
    print(
        f"\n{requests} requests per scenario, in-process, one at a time; off: {sorted(off) or 'none'}"
    )
    print(
        f"{'scenario':<9} {'python ms':>10} {'pg ms':>8} {'total ms':>9} {'vs base':>8} "
        f"{'wall ms':>8}"
    )
    for name, row in results.items():
        pg = row["pg_ms"]
        row["total_ms"] = row["python_ms"] + (pg or 0)
        row["ratio_to_baseline"] = row["total_ms"] / base if base else float("nan")
        shown_pg = f"{pg:>8.3f}" if pg is not None else f"{'n/a':>8}"
        print(
            f"{name:<9} {row['python_ms']:>10.3f} {shown_pg} {row['total_ms']:>9.3f} "
            f"{row['ratio_to_baseline']:>8.1f} {row['wall_ms']:>8.3f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
