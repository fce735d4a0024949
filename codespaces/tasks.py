"""Celery tasks of the codespaces app."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from codespaces import idle, services
from codespaces.services import waste
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


# Workload ids per follow-up: the observer passes one scheduling transaction's worth (a cycle's
# placements); more is refused rather than loading an unbounded list.
MAX_FOLLOW_UP_IDS = 10_000


@shared_task(acks_late=True)
def follow_codespace_workloads_task(workload_ids: list[int]) -> dict[str, object]:
    """After a scheduling commit: record on the timeline of these workloads' codespaces what their
    workload did (`services.sync_from_workloads`). Takes ids and re-reads the rows; idempotent (a second
    run finds the recorded phase already equal to the observed one); one codespace that raises is
    logged and counted, the others are still followed."""
    ids = [int(i) for i in workload_ids[:MAX_FOLLOW_UP_IDS]]
    failures = ItemFailures()
    changed = services.sync_from_workloads(ids, failures=failures)
    return {"changed": changed, "failed": failures.failed, "failed_ids": failures.failed_ids}


@shared_task(acks_late=True)
def reconcile_codespaces_task() -> dict[str, object]:
    """Beat: the follow-up for every active codespace, the safety net for a lost follow-up task (what
    a codespace shows is derived from its workload and never waits for this; its timeline, start time
    and a reclaim's stop do). Idempotent; returns how many codespaces changed and which ones failed (logged, the others
    still synced)."""
    failures = ItemFailures()
    changed = services.reconcile_codespaces(failures)
    if changed:
        logger.info("codespaces reconcile: %d codespaces followed their workload", changed)
    return {"changed": changed, "failed": failures.failed, "failed_ids": failures.failed_ids}


@shared_task
def send_waste_digests_task() -> dict[str, object]:
    """The weekly waste digest of every team with admins: email to its admins, and the report as
    JSON to TESSERA_WASTE_WEBHOOK_URL (codespaces.services.waste)."""
    sent = waste.send_waste_digests(timezone.now())
    logger.info("waste digests sent to %d teams", len(sent))
    return {"teams": sent}
