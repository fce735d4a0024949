"""`make run`'s supervisor: the embedded broker, the worker, beat and the web server, each restarted when
it dies, and `make stop`, which says what it found dead.

    python -m portal.supervise run --host 127.0.0.1 --port 8000 --queues default,sched-0
    python -m portal.supervise stop

`run` starts, in this order, the Valkey broker (portal.embedded_broker; skipped when CELERY_BROKER_URL
names another broker), the `--setup` commands (migrate, seed_demo: they may send tasks), `celery worker --pool=solo`, `celery beat` (a separate process, so one crash does
not take both) and Django's development server. A program that exits is started again after a backoff
(1 s, 2 s, 4 s ... at most 30 s; back to 1 s once it ran for 60 s), and a line in its log says when, why
(exit code or signal) and after how long. Logs are appended, never truncated: var/broker.log,
var/worker.log, var/beat.log; the web server logs to this terminal. Each program's pid is in
var/run/<name>.pid (it stays there, naming the dead process, while the program waits for its restart),
the supervisor's own in var/run/supervisor.pid, and what happened in var/run/supervise.json.
SIGTERM or SIGINT (Ctrl-C) stops the programs in reverse order.

`stop` reads those files, stops the supervisor (which stops its programs) and reports each program:
stopped, or "worker was not running: it died (pid N); see var/worker.log", and how often it restarted.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from portal import embedded_broker

ROOT = Path(__file__).resolve().parent.parent
STOP_ORDER = ("web", "beat", "worker", "broker")  # the reverse of the start order
STOP_TIMEOUT_SECONDS = 15.0
BROKER_READY_SECONDS = 20.0


class SetupFailed(Exception):
    """A setup command (migrate, seed) failed: nothing else is started."""


@dataclass
class Backoff:
    """Seconds to wait before the next start: doubles per quick crash, capped; resets after a long run."""

    initial: float = 1.0
    cap: float = 30.0
    reset_after: float = 60.0
    crashes: int = 0

    def after_exit(self, ran_for: float) -> float:
        if ran_for >= self.reset_after:
            self.crashes = 0
        delay = min(self.cap, self.initial * 2**self.crashes)
        self.crashes += 1
        return delay


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def now_text() -> str:
    return datetime.now(UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by its parent) is not running
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


@dataclass
class Program:
    """One supervised process. `log` None: the supervisor's stdout (the web server's request log)."""

    name: str
    argv: list[str]
    log: Path | None = None
    ready: Callable[[], bool] | None = None  # waited for after each start (the broker answers PING)
    before_setup: bool = (
        False  # started before the setup commands (they may send tasks: the broker)
    )
    backoff: Backoff = field(default_factory=Backoff)
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    restarts: int = 0
    last_exit: str = ""
    last_exit_at: str = ""


class Supervisor:
    def __init__(
        self,
        programs: Sequence[Program],
        run_dir: Path,
        *,
        env: dict[str, str] | None = None,
        setup: Sequence[Sequence[str]] = (),
        clock: Callable[[], float] = time.monotonic,
        out: TextIO = sys.stderr,
    ) -> None:
        self.programs = list(programs)
        self.run_dir = run_dir
        self.env = env if env is not None else dict(os.environ)
        self.setup = [list(command) for command in setup]
        self.clock = clock
        self.out = out
        self.stopping = False

    # --- messages and files ---------------------------------------------------------------------
    def say(self, program: Program, message: str) -> None:
        line = f"{now_text()} supervisor: {message}\n"
        self.out.write(line)
        self.out.flush()
        if program.log is not None:
            with program.log.open("a") as log:
                log.write(line)

    def pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def write_state(self) -> None:
        state = {
            p.name: {
                "pid": p.process.pid if p.process else None,
                "restarts": p.restarts,
                "last_exit": p.last_exit,
                "last_exit_at": p.last_exit_at,
                "log": _shown(p.log) if p.log else "",
            }
            for p in self.programs
        }
        (self.run_dir / "supervise.json").write_text(json.dumps(state, indent=1))

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self, program: Program) -> None:
        output: Any = None
        if program.log is not None:
            program.log.parent.mkdir(parents=True, exist_ok=True)
            output = program.log.open("ab")
        try:
            # a session of its own: Ctrl-C reaches the supervisor only, which stops programs in order
            program.process = subprocess.Popen(
                program.argv,
                cwd=ROOT,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT if output is not None else None,
                start_new_session=True,
            )
        finally:
            if output is not None:
                output.close()
        program.started_at = self.clock()
        program.restart_at = None
        self.pid_file(program.name).write_text(f"{program.process.pid}\n")
        again = f" (restart {program.restarts})" if program.restarts else ""
        self.say(program, f"started {program.name} (pid {program.process.pid}){again}")
        self.write_state()
        if program.ready is not None and not program.ready():
            self.say(program, f"{program.name} did not become ready; see its log")

    def start_all(self) -> None:
        """The `before_setup` programs, then the setup commands (each must succeed), then the rest."""
        for program in (p for p in self.programs if p.before_setup):
            self.start(program)
        for command in self.setup:
            result = subprocess.run(command, cwd=ROOT, env=self.env, check=False)
            if result.returncode != 0:
                raise SetupFailed(
                    f"{' '.join(command)} failed ({describe_exit(result.returncode)})"
                )
        for program in (p for p in self.programs if not p.before_setup):
            self.start(program)

    def check(self) -> None:
        """Notice programs that exited and start the ones whose backoff is over."""
        now = self.clock()
        for program in self.programs:
            process = program.process
            if program.restart_at is None and process is not None:
                code = process.poll()
                if code is None:
                    continue
                ran_for = now - program.started_at
                delay = program.backoff.after_exit(ran_for)
                program.restart_at = now + delay
                program.last_exit = describe_exit(code)
                program.last_exit_at = now_text()
                program.restarts += 1
                self.say(
                    program,
                    f"{program.name} (pid {process.pid}) died: {program.last_exit} after "
                    f"{ran_for:.1f} s; restarting in {delay:g} s (restart {program.restarts})",
                )
                self.write_state()
            if program.restart_at is not None and now >= program.restart_at and not self.stopping:
                self.start(program)

    def stop_all(self) -> None:
        self.stopping = True
        by_name = {p.name: p for p in self.programs}
        order = [by_name[n] for n in STOP_ORDER if n in by_name]
        order += [p for p in reversed(self.programs) if p not in order]
        for program in order:
            process = program.process
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=STOP_TIMEOUT_SECONDS)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)
                self.say(program, f"stopped {program.name} (pid {process.pid})")
            self.pid_file(program.name).unlink(missing_ok=True)
        self.write_state()

    def run(self, poll_seconds: float = 0.2) -> int:
        def on_signal(signum: int, _frame: Any) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "supervisor.pid").write_text(f"{os.getpid()}\n")
        try:
            self.start_all()
            while not self.stopping:
                time.sleep(poll_seconds)
                self.check()
        except SetupFailed as exc:
            self.out.write(f"{now_text()} supervisor: {exc}; stopping\n")
            return 1
        finally:
            self.stop_all()
            (self.run_dir / "supervisor.pid").unlink(missing_ok=True)
        return 0


# --- what `make run` supervises -------------------------------------------------------------------
def programs(
    *, host: str, port: int, queues: str, var_dir: Path, restart_delay: float = 1.0
) -> list[Program]:
    python = sys.executable
    celery = [python, "-m", "celery", "-A", "portal"]
    result: list[Program] = []
    broker_port = embedded_broker.embedded_broker_port()
    own_broker = os.environ.get("CELERY_BROKER_URL", "") in (
        "",
        embedded_broker.embedded_broker_url(broker_port),
    )
    if own_broker:
        data_dir = var_dir / "broker"
        data_dir.mkdir(parents=True, exist_ok=True)
        result.append(
            Program(
                "broker",
                embedded_broker.server_command(
                    embedded_broker.server_binary(), port=broker_port, data_dir=data_dir
                ),
                log=var_dir / "broker.log",
                ready=lambda: embedded_broker.wait_until_answers(
                    broker_port, timeout=BROKER_READY_SECONDS
                ),
                before_setup=True,
            )
        )
    result += [
        Program(
            "worker",
            [*celery, "worker", "--pool=solo", "-Q", queues, "--loglevel=INFO"],
            log=var_dir / "worker.log",
        ),
        Program(
            "beat",
            [
                *celery,
                "beat",
                "--loglevel=INFO",
                "--schedule",
                str(var_dir / "celerybeat-schedule"),
            ],
            log=var_dir / "beat.log",
        ),
        Program(
            "web",
            [python, "manage.py", "runserver", f"{host}:{port}", "--noreload"],
        ),
    ]
    for program in result:
        program.backoff = Backoff(initial=restart_delay)
    return result


def stop(run_dir: Path, out: TextIO = sys.stdout, timeout: float = 60.0) -> int:
    """Stop what `run` started and say, per program, whether it was running or had died."""
    state: dict[str, Any] = {}
    state_file = run_dir / "supervise.json"
    if state_file.exists():
        try:
            state = json.loads(state_file.read_text())
        except ValueError:
            state = {}
    names = [*STOP_ORDER, *(n for n in state if n not in STOP_ORDER)]
    found: dict[
        str, tuple[int, bool]
    ] = {}  # name -> (pid, alive), read before anything is signalled
    for name in names:
        pid = _read_pid(run_dir / f"{name}.pid")
        if pid is not None:
            found[name] = (pid, pid_alive(pid))
    supervisor = _read_pid(run_dir / "supervisor.pid")
    if supervisor is None and not found:
        out.write("Tessera was not running (nothing in var/run/).\n")
        return 0
    if supervisor is not None:
        if pid_alive(supervisor):
            os.kill(supervisor, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while pid_alive(supervisor) and time.monotonic() < deadline:
                time.sleep(0.1)
            if pid_alive(supervisor):
                os.kill(supervisor, signal.SIGKILL)
            out.write(f"stopped the supervisor (pid {supervisor})\n")
        else:
            out.write(
                f"the supervisor was not running: it died (pid {supervisor}); nothing restarted "
                "the programs below\n"
            )
        (run_dir / "supervisor.pid").unlink(missing_ok=True)
    for name, (pid, alive) in found.items():
        info = state.get(name, {})
        log = info.get("log") or (
            "the output of `make run`" if name == "web" else f"var/{name}.log"
        )
        if alive:
            if pid_alive(pid):  # the supervisor did not stop it (it was killed, or this is old)
                _terminate(pid)
            out.write(f"stopped {name} (pid {pid})\n")
        else:
            out.write(f"{name} was not running: it died (pid {pid}); see {log}\n")
        if info.get("restarts"):
            out.write(
                f"  {name} had restarted {info['restarts']} time(s); last: {info['last_exit']} at "
                f"{info['last_exit_at']}; see {log}\n"
            )
        (run_dir / f"{name}.pid").unlink(missing_ok=True)
    return 0


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _terminate(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.supervise", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="start and supervise broker, worker, beat and web")
    run_parser.add_argument("--host", default="127.0.0.1")
    run_parser.add_argument("--port", type=int, default=8000)
    run_parser.add_argument("--queues", default="default")
    run_parser.add_argument(
        "--setup",
        action="append",
        default=[],
        help="a manage.py command line to run once the broker answers (repeatable), e.g. 'migrate'",
    )
    run_parser.add_argument(
        "--restart-delay",
        type=float,
        default=1.0,
        help="the first restart's delay (doubles, max 30 s)",
    )
    sub.add_parser("stop", help="stop what `run` started and report what had died")
    args = parser.parse_args(argv)
    var_dir = Path(os.environ.get("TESSERA_VAR_DIR", str(ROOT / "var")))
    run_dir = var_dir / "run"
    if args.command == "stop":
        return stop(run_dir)
    # Django's "do not use in production" banner is hidden: the README says how to run in production
    env = dict(os.environ, DJANGO_RUNSERVER_HIDE_WARNING="true")
    progs = programs(
        host=args.host,
        port=args.port,
        queues=args.queues,
        var_dir=var_dir,
        restart_delay=args.restart_delay,
    )
    setup = [[sys.executable, "manage.py", *shlex.split(line)] for line in args.setup]
    return Supervisor(progs, run_dir, env=env, setup=setup).run()


if __name__ == "__main__":
    sys.exit(main())
