"""The chaos harness's checkpoint hook, without the stack: it accepts a correctly signed notice and
reports anything else (a bad signature, a body that is not a notice) and over HTTP answers 204 or 400."""

from __future__ import annotations

import hashlib
import hmac
import json

import requests

from tests.chaos.hook import SIGNATURE_HEADER, CheckpointHook

BODY = json.dumps({"notice_id": 7, "workload_id": 42, "event": "reclaim_notice"}).encode()


def signed(body: bytes, secret: str = "s") -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_a_signed_notice_is_accepted_and_anything_else_is_a_problem() -> None:
    hook = CheckpointHook(secret="s")
    good = hook.judge(BODY, signed(BODY))
    assert (good.notice_id, good.workload_id, good.problem) == (7, 42, "")
    assert hook.judge(BODY, signed(BODY, "other")).problem == "bad or missing signature"
    assert hook.judge(BODY, "").problem == "bad or missing signature"
    assert hook.judge(b"{}", signed(b"{}")).problem.startswith("not a notice")


def test_the_hook_answers_over_http_and_records_every_call() -> None:
    hook = CheckpointHook(secret="s")
    hook.start()
    try:
        ok = requests.post(hook.url, data=BODY, headers={SIGNATURE_HEADER: signed(BODY)}, timeout=5)
        bad = requests.post(hook.url, data=BODY, timeout=5)
    finally:
        hook.stop()
    assert (ok.status_code, bad.status_code) == (204, 400)
    assert [(c.notice_id, c.problem) for c in hook.snapshot()] == [
        (7, ""),
        (None, "bad or missing signature"),
    ]
