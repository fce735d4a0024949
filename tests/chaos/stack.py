"""The product as separate processes on loopback: a fresh PostgreSQL database and Redis db, gunicorn
(its master restarts killed workers), a Celery worker for the scheduling queues, one for the default
queue, and beat. `Stack` starts, kills and restarts them the way a supervisor would."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import psycopg
import redis
import requests

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


class StackError(RuntimeError):
    """A component did not start (the message carries the tail of its log)."""


def database_name(url: str) -> str:
    return urlparse(url).path.lstrip("/")


def _admin_url(url: str) -> str:
    return urlunparse(urlparse(url)._replace(path="/postgres"))


def recreate_database(url: str) -> None:
    """Drop and create the database `url` names (it must contain "chaos": this is destructive)."""
    name = database_name(url)
    if "chaos" not in name or not name.replace("_", "").isalnum():
        raise StackError(f"refusing to recreate database {name!r}: its name must contain 'chaos'")
    with psycopg.connect(_admin_url(url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def flush_redis(url: str) -> None:
    redis.Redis.from_url(url).flushdb()


def free_port() -> int:
    """A free loopback port: the first free one of TESSERA_CHAOS_PORTS ("8161-8169", for a machine
    shared by several runs) when it is set, else any the kernel gives."""
    low, _, high = os.environ.get("TESSERA_CHAOS_PORTS", "").partition("-")
    candidates = range(int(low), int(high or low) + 1) if low else range(0, 1)
    for candidate in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise RuntimeError(f"no free port in TESSERA_CHAOS_PORTS={os.environ['TESSERA_CHAOS_PORTS']}")


def children_of(pid: int) -> list[int]:
    """Direct child processes of `pid` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ..."; comm may contain spaces, so split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry))
    return sorted(found)


@dataclass
class Component:
    """One supervised process (or process group)."""

    name: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.starts += 1

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (main process and pool children), as a crash would."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=15)

    def stop(self, timeout: float = 15.0) -> None:
        if not self.alive():
            return
        assert self.process is not None
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=timeout)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            self.kill()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class StackConfig:
    database_url: str
    broker_url: str
    web_workers: int = 3
    worker_concurrency: int = 2
    scheduling_queues: int = 2
    log_dir: Path = field(default_factory=lambda: ROOT / "var" / "chaos")
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass
class Stack:
    """gunicorn + Celery workers (scheduling queues, default queue) + beat against one database."""

    config: StackConfig
    port: int = field(default_factory=free_port)
    components: dict[str, Component] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "TESSERA_", "CELERY_", "PYTEST"))
        }
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "portal.settings",
                "DEBUG": "false",  # as in production: JSON error bodies, no query log growing
                "DATABASE_URL": self.config.database_url,
                "CELERY_BROKER_URL": self.config.broker_url,
                "TESSERA_VAR_DIR": str(self.config.log_dir / "var"),
                "TESSERA_SCHEDULING_QUEUES": str(self.config.scheduling_queues),
                # fast loops, so a run of a few minutes sees many cycles, syncs and reconciles
                "TESSERA_CYCLE_INTERVAL_SECONDS": "1",
                "TESSERA_SIM_START_DELAY_SECONDS": "0.5",
                "TESSERA_RECONCILE_INTERVAL_SECONDS": "5",
                "TESSERA_CODESPACE_RECONCILE_SECONDS": "3",
                # the periodic audit is not the recovery probe (the sweeps' claims are); every 10 s it
                # still runs ~20 times a run without taking one of the default worker's two processes
                "TESSERA_AUDIT_INTERVAL_SECONDS": "10",
                # many clients share a few tokens: rate limits are not what is under test
                "TESSERA_API_RATE_PER_TOKEN": "1000000",
                "TESSERA_API_RATE_PER_TENANT": "1000000",
                "LOG_LEVEL": "WARNING",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.config.extra_env)
        return env

    def manage(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PYTHON, "manage.py", *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def prepare(self) -> dict[str, Any]:
        """Fresh database and Redis db, migrations, seed; returns what the seed created."""
        recreate_database(self.config.database_url)
        flush_redis(self.config.broker_url)
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        for old in self.config.log_dir.glob("*.log"):
            old.unlink()
        migrated = self.manage("migrate", "--noinput")
        if migrated.returncode != 0:
            raise StackError(f"migrate failed:\n{migrated.stdout[-2000:]}{migrated.stderr[-3000:]}")
        seeded = subprocess.run(
            [PYTHON, "-m", "tests.chaos.seed"],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if seeded.returncode != 0:
            raise StackError(f"seed failed:\n{seeded.stderr[-3000:]}")
        return dict(json.loads(seeded.stdout.strip().splitlines()[-1]))

    def _component(self, name: str, command: list[str]) -> Component:
        component = Component(name, command, self.env(), self.config.log_dir / f"{name}.log")
        self.components[name] = component
        return component

    def start(self) -> None:
        queues = ",".join(f"sched-{i}" for i in range(self.config.scheduling_queues))
        celery = [PYTHON, "-m", "celery", "-A", "portal"]
        concurrency = str(self.config.worker_concurrency)
        self._component(
            "web",
            [
                PYTHON, "-m", "gunicorn", "portal.wsgi", "-b", f"127.0.0.1:{self.port}",
                "-w", str(self.config.web_workers), "--timeout", "30", "--graceful-timeout", "5",
            ],
        )  # fmt: skip
        self._component(
            "worker-scheduling",
            [*celery, "worker", "-Q", queues, "-c", concurrency, "-n", "chaos-sched@%h",
             "--without-gossip", "--without-mingle", "--loglevel=WARNING"],
        )  # fmt: skip
        # As deployed (docs/scheduling.md: several workers consume every shard queue), a second
        # scheduling worker: a killed one's held cycles have a survivor that runs them once it takes
        # them over (<= dead_after + heartbeat), instead of waiting for the restarted one to boot
        # (13-16 s on a loaded machine). The fault injector kills `worker-scheduling` only.
        self._component(
            "worker-scheduling-standby",
            [*celery, "worker", "-Q", queues, "-c", "1", "-n", "chaos-sched-standby@%h",
             "--without-gossip", "--without-mingle", "--loglevel=WARNING"],
        )  # fmt: skip
        self._component(
            "worker-default",
            [*celery, "worker", "-Q", "default", "-c", concurrency, "-n", "chaos-default@%h",
             "--without-gossip", "--without-mingle", "--loglevel=WARNING"],
        )  # fmt: skip
        schedule = self.config.log_dir / "celerybeat-schedule"
        self._component(
            "beat",
            [*celery, "beat", "--loglevel=WARNING", "-s", str(schedule)],
        )
        for component in self.components.values():
            component.start()
        self.wait_web()

    def wait_web(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        web = self.components["web"]
        while time.monotonic() < deadline:
            if not web.alive():
                raise StackError(f"gunicorn exited:\n{web.log_tail()}")
            try:
                if requests.get(f"{self.base_url}/accounts/login/", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        raise StackError(f"gunicorn did not answer within {timeout}s:\n{web.log_tail()}")

    def web_workers(self) -> list[int]:
        return children_of(self.components["web"].pid)

    def restart(self, name: str) -> None:
        self.components[name].start()

    def ensure_running(self) -> None:
        """Start again whatever is down (the end of a run, before quiescence)."""
        for component in self.components.values():
            if not component.alive():
                component.start()

    def stop(self) -> None:
        for component in self.components.values():
            component.stop()

    def terminate_database_session(self) -> int | None:
        """pg_terminate_backend of one random session of the product's database; its pid, if any."""
        name = database_name(self.config.database_url)
        with psycopg.connect(_admin_url(self.config.database_url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT pid, pg_terminate_backend(pid) FROM ("
                " SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend' ORDER BY random() LIMIT 1) s",
                (name,),
            ).fetchone()
        return int(row[0]) if row else None

    def redis(self) -> redis.Redis:
        """A client of the stack's broker (Redis)."""
        return redis.Redis.from_url(self.config.broker_url)

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.config.database_url, autocommit=True) as conn:
            return list(conn.execute(sql, params).fetchall())  # type: ignore[arg-type]
