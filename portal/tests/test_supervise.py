"""`make run`'s supervisor (issue 38): a program that dies is restarted with backoff, its log is appended
to and says why; `make stop` names each program it found dead."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from portal.supervise import (
    Backoff,
    Program,
    Supervisor,
    describe_exit,
    pid_alive,
    programs,
    stop,
)


def test_backoff_doubles_per_quick_crash_is_capped_and_resets_after_a_long_run() -> None:
    backoff = Backoff(initial=1.0, cap=8.0, reset_after=60.0)
    assert [backoff.after_exit(ran_for=0.5) for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert backoff.after_exit(ran_for=61.0) == 1.0
    assert backoff.after_exit(ran_for=2.0) == 2.0


@pytest.mark.parametrize(
    ("_case", "returncode", "text"),
    [
        ("SIGKILL", -9, "killed by SIGKILL"),
        ("SIGTERM", -15, "killed by SIGTERM"),
        ("an error exit", 1, "exit code 1"),
    ],
)
def test_an_exit_is_described_by_its_signal_or_code(_case: str, returncode: int, text: str) -> None:
    assert describe_exit(returncode) == text


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_dead_program_is_logged_by_appending_and_restarted_after_its_backoff(
    tmp_path: Path,
) -> None:
    # given a program that exits at once with code 3, whose log already has a line
    log = tmp_path / "worker.log"
    log.write_text("earlier line\n")
    program = Program(
        "worker", [sys.executable, "-c", "import sys; sys.exit(3)"], log=log, backoff=Backoff(2.0)
    )
    clock = FakeClock()
    supervisor = Supervisor([program], tmp_path, clock=clock, out=io.StringIO())
    supervisor.start(program)
    first_pid = program.process.pid  # type: ignore[union-attr]
    program.process.wait(timeout=30)  # type: ignore[union-attr]
    # when the supervisor looks, then it records the death and waits out the backoff
    clock.now += 0.5
    supervisor.check()
    assert program.restarts == 1
    assert program.process.pid == first_pid  # type: ignore[union-attr]
    assert (tmp_path / "worker.pid").read_text() == f"{first_pid}\n"  # names the dead process
    clock.now += 1.0
    supervisor.check()
    assert program.process.pid == first_pid  # type: ignore[union-attr]  # 1.5 s < 2 s backoff
    clock.now += 1.0
    supervisor.check()
    second_pid = program.process.pid  # type: ignore[union-attr]
    assert second_pid != first_pid
    program.process.wait(timeout=30)  # type: ignore[union-attr]
    lines = log.read_text().splitlines()
    assert lines[0] == "earlier line"  # appended, never truncated
    assert any(
        line.endswith(
            f"supervisor: worker (pid {first_pid}) died: exit code 3 after 0.5 s; "
            "restarting in 2 s (restart 1)"
        )
        for line in lines
    )
    assert any(line.endswith(f"started worker (pid {second_pid}) (restart 1)") for line in lines)
    state = json.loads((tmp_path / "supervise.json").read_text())
    assert state["worker"]["restarts"] == 1
    assert state["worker"]["last_exit"] == "exit code 3"
    supervisor.stop_all()
    assert not (tmp_path / "worker.pid").exists()


def test_stop_names_the_program_that_died_and_stops_the_one_still_running(tmp_path: Path) -> None:
    # given a worker pid file naming a process that exited, and a beat that still runs
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (tmp_path / "worker.pid").write_text(f"{dead.pid}\n")
    (tmp_path / "beat.pid").write_text(f"{alive.pid}\n")
    (tmp_path / "supervise.json").write_text(
        json.dumps(
            {
                "worker": {
                    "restarts": 2,
                    "last_exit": "killed by SIGKILL",
                    "last_exit_at": "2026-12-07 14:29:03",
                    "log": "var/worker.log",
                }
            }
        )
    )
    out = io.StringIO()
    # when stopping
    assert stop(tmp_path, out=out) == 0
    alive.wait(timeout=30)
    # then
    assert out.getvalue().splitlines() == [
        f"stopped beat (pid {alive.pid})",
        f"worker was not running: it died (pid {dead.pid}); see var/worker.log",
        "  worker had restarted 2 time(s); last: killed by SIGKILL at 2026-12-07 14:29:03; "
        "see var/worker.log",
    ]
    assert not pid_alive(alive.pid)
    assert list(tmp_path.glob("*.pid")) == []


def test_stop_with_nothing_running_says_so(tmp_path: Path) -> None:
    out = io.StringIO()
    assert stop(tmp_path, out=out) == 0
    assert out.getvalue() == "Tessera was not running (nothing in var/run/).\n"


def test_make_run_supervises_a_loopback_broker_a_worker_beat_and_web(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.setenv("TESSERA_EMBEDDED_BROKER_PORT", "6412")
    progs = programs(host="127.0.0.1", port=8101, queues="default,sched-0", var_dir=tmp_path)
    assert [p.name for p in progs] == ["broker", "worker", "beat", "web"]
    broker, worker, beat, web = progs
    argv = broker.argv
    assert argv[argv.index("--bind") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "6412"
    assert argv[argv.index("--dir") + 1] == str(tmp_path / "broker")
    assert broker.before_setup is True
    assert [p.log for p in progs] == [
        tmp_path / "broker.log",
        tmp_path / "worker.log",
        tmp_path / "beat.log",
        None,
    ]
    assert "--beat" not in worker.argv  # beat runs on its own: one crash does not take both
    assert worker.argv[-4:] == ["--pool=solo", "-Q", "default,sched-0", "--loglevel=INFO"]
    assert beat.argv[5] == "beat"
    assert web.argv[-2:] == ["127.0.0.1:8101", "--noreload"]


def test_no_embedded_broker_when_the_broker_url_names_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:6379/9")
    progs = programs(host="127.0.0.1", port=8101, queues="default", var_dir=tmp_path)
    assert [p.name for p in progs] == ["worker", "beat", "web"]
