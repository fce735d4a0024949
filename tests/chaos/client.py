"""An API client that behaves like a careful script: Idempotency-Key on every POST, the same key on
every retry, retries on connection errors, on 5xx and on `idempotency_in_progress`, and a record of
every attempt (so lost, duplicated and failed requests can be counted afterwards)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import requests

RETRYABLE_ERRORS = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
)
MAX_ATTEMPTS = 12
REQUEST_TIMEOUT = 20.0


@dataclass
class Attempt:
    """One HTTP attempt: when, and the status (with the start of the body of a 5xx) or the
    connection error."""

    at: float
    status: int | None
    error: str = ""
    done: float = 0.0  # when the answer (or the error) came back


@dataclass
class Call:
    """One logical request and every attempt it took."""

    method: str
    path: str
    started: float
    key: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    status: int | None = None
    body: Any = None
    etag: str = ""
    finished: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def error_code(self) -> str:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return str(self.body["error"].get("code", ""))
        return ""

    @property
    def server_errors(self) -> list[Attempt]:
        return [a for a in self.attempts if a.status is not None and a.status >= 500]


class ApiClient:
    """One user's session against the stack."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        if_match: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> Call:
        call = Call(method, path, started=time.time())
        headers: dict[str, str] = {}
        if method == "POST":
            call.key = uuid.uuid4().hex
            headers["Idempotency-Key"] = call.key
        if if_match is not None:
            headers["If-Match"] = if_match
        delay = 0.1
        for _attempt in range(MAX_ATTEMPTS):
            at = time.time()
            try:
                response = self.session.request(
                    method,
                    f"{self.base_url}/api/v1/{path}",
                    json=json,
                    headers=headers,
                    params=params,
                    timeout=REQUEST_TIMEOUT,
                )
            except RETRYABLE_ERRORS as exc:
                call.attempts.append(Attempt(at, None, type(exc).__name__, time.time()))
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            detail = response.text[:300] if response.status_code >= 500 else ""
            call.attempts.append(Attempt(at, response.status_code, detail, time.time()))
            call.status = response.status_code
            try:
                call.body = response.json() if response.content else None
            except ValueError:
                call.body = response.text[:500]
            call.etag = response.headers.get("ETag", "")
            in_progress = (
                response.status_code == 409 and call.error_code == "idempotency_in_progress"
            )
            if response.status_code >= 500 or in_progress:
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            break
        call.finished = time.time()
        return call
