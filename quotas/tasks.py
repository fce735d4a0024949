"""Celery tasks of the quotas app (beat): loan expiry and budget notices."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from quotas.budgets import check_budget_alerts
from quotas.loans import expire_loans

logger = logging.getLogger(__name__)


@shared_task(acks_late=True)
def expire_quota_loans_task() -> dict[str, Any]:
    """Beat: expire the loans whose window ended (each a compare-and-set; one bad row is logged and
    counted, the others expire)."""
    report = expire_loans()
    if report.expired:
        logger.info("quota loans: expired %s", report.expired)
    return {"expired": report.expired, **report.failures.as_dict()}


@shared_task(acks_late=True)
def check_budget_alerts_task() -> dict[str, Any]:
    """Beat: tell team admins of budgets at 80 % / 100 % (once per period and threshold)."""
    report = check_budget_alerts()
    failures = report.failures.as_dict() if report.failures else {}
    return {"checked": report.checked, "sent": report.sent, **failures}
