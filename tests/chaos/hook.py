"""The checkpoint hook the chaos run's quotas call (polite reclaim): a small HTTP endpoint on loopback in
the harness that receives every reclaim notice the workers POST, checks its HMAC signature with the
secret the stack was given, and remembers what came (the run's report counts calls and bad ones).

The signature is checked from its documented contract (docs/quotas.md: `X-Tessera-Signature:
sha256=<hex HMAC-SHA256 of the body>`), not with the product's own `sign`, so a broken signer fails here
instead of agreeing with itself; and the harness stays free of Django."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.chaos.stack import free_port

HOOK_SECRET = "chaos-checkpoint-hook-secret"
SIGNATURE_HEADER = "X-Tessera-Signature"
MAX_BODY = 64 * 1024


@dataclass
class HookCall:
    """One POST the hook received: when, the notice it names, and whether it was well formed and
    correctly signed (`problem` empty)."""

    at: float
    notice_id: int | None
    workload_id: int | None
    problem: str = ""


@dataclass
class CheckpointHook:
    """A ThreadingHTTPServer on 127.0.0.1 (a free port) that records every call."""

    secret: str = HOOK_SECRET
    calls: list[HookCall] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/checkpoint"

    def judge(self, body: bytes, signature: str) -> HookCall:
        """What one request was: its notice and workload, or the problem with it."""
        now = time.time()
        expected = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(signature, expected):
            return HookCall(now, None, None, "bad or missing signature")
        try:
            data: Any = json.loads(body)
            return HookCall(now, int(data["notice_id"]), int(data["workload_id"]))
        except (ValueError, KeyError, TypeError):
            return HookCall(now, None, None, f"not a notice: {body[:100]!r}")

    def start(self) -> None:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
                call = hook.judge(self.rfile.read(length), self.headers.get(SIGNATURE_HEADER, ""))
                with hook.lock:
                    hook.calls.append(call)
                self.send_response(400 if call.problem else 204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (quiet)
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def snapshot(self) -> list[HookCall]:
        with self.lock:
            return list(self.calls)
