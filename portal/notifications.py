"""Telling people: operators (`notify_operators`) by an email to `TESSERA_OPERATOR_EMAILS` and a JSON POST to
`TESSERA_OPERATOR_WEBHOOK_URL` (each optional; with neither set the audit trail and the pages are the
only record), or any list of people and a webhook (`deliver`: the weekly waste digests). Call it after the commit of what it reports (`transaction.on_commit`): a delivery that
fails is logged, never raised, so a mail server down does not undo a health decision."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

from django.conf import settings
from django.core.mail import send_mail

logger = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_SECONDS = 5.0
MAX_SUBJECT_LENGTH = 200
MAX_BODY_LENGTH = 20_000


def notify_operators(subject: str, body: str, payload: dict[str, Any]) -> list[str]:
    """Send `subject`/`body` by email and `payload` (plus the subject) to the operators' webhook.
    Returns the channels that accepted it ("email", "webhook")."""
    return deliver(
        list(getattr(settings, "TESSERA_OPERATOR_EMAILS", [])),
        getattr(settings, "TESSERA_OPERATOR_WEBHOOK_URL", ""),
        subject,
        body,
        payload,
    )


def deliver(
    recipients: list[str], url: str, subject: str, body: str, payload: dict[str, Any]
) -> list[str]:
    """Email `recipients` and POST `payload` (plus the subject) to `url`, each when given; failures
    are logged. Returns the channels that accepted it."""
    subject = subject[:MAX_SUBJECT_LENGTH]
    body = body[:MAX_BODY_LENGTH]
    delivered: list[str] = []
    if recipients:
        try:
            send_mail(subject, body, None, recipients)
            delivered.append("email")
        except Exception:  # noqa: BLE001  (any mail failure is logged, the decision stands)
            logger.exception("email %r was not sent", subject)
    if url:
        data = json.dumps({"subject": subject, **payload}, default=str).encode()
        request = urllib.request.Request(  # noqa: S310  (an operator-configured URL)
            url, data=data, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_SECONDS):  # noqa: S310
                delivered.append("webhook")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            logger.warning("webhook %s failed for %r: %s", url, subject, exc)
    return delivered
