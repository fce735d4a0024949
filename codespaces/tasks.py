"""Celery tasks of the codespaces app."""

from __future__ import annotations

import logging

from celery import shared_task

from codespaces import idle, services
from portal.periodic import ItemFailures

logger = logging.getLogger(__name__)


@shared_task(acks_late=True)
def check_idle_codespaces_task() -> dict[str, object]:
    """Beat: warn idle running codespaces, stop those still idle after the warning, clear the rest.

    Idempotent: every change is a compare-and-set on the codespace's state, so two overlapping runs
    cannot warn or stop twice. A codespace whose check raises is logged and counted (`failed`,
    `failed_ids`); the others are still checked.
    """
    report = idle.check_idle_codespaces()
    if report.warned or report.stopped:
        logger.info("idle codespaces: warned %s, stopped %s", report.warned, report.stopped)
    return {
        "checked": report.checked,
        "warned": report.warned,
        "stopped": report.stopped,
        "cleared": report.cleared,
        "failed": len(report.failed_ids),
        "failed_ids": report.failed_ids,
    }


@shared_task(acks_late=True)
def reconcile_codespaces_task() -> dict[str, object]:
    """Beat: re-apply each active codespace's workload state (placement, failure, reclaim, and the
    pending reason and queue position, which the scheduling cycle updates without notifying).
    Idempotent; returns how many codespaces changed and which ones failed (logged, the others
    still synced)."""
    failures = ItemFailures()
    changed = services.reconcile_codespaces(failures)
    if changed:
        logger.info("codespaces reconcile: %d codespaces followed their workload", changed)
    return {"changed": changed, "failed": failures.failed, "failed_ids": failures.failed_ids}
