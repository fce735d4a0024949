"""Celery tasks of telemetry: ingest every minute, prune every hour (beat entries in portal/settings.py).

Both claim their period (portal.periodic) in the transaction that does the work: a beat restarted
mid-period, or a message delivered twice, does not ingest or prune that period again."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.periodic import claim_period, period_start
from portal.transactions import run_in_transaction
from scheduling.telemetry import health, ingestion, rollups
from scheduling.telemetry.prometheus import PrometheusError

logger = logging.getLogger(__name__)

INGEST_PERIOD_SECONDS = 60
PRUNE_PERIOD_SECONDS = 3600


@shared_task(autoretry_for=(PrometheusError,), retry_backoff=10, retry_kwargs={"max_retries": 2})
def ingest_telemetry_task() -> dict[str, object]:
    """Record this minute's telemetry (simulated or Prometheus) and refresh the hour's rollups, once
    per minute: a second run for a minute already recorded skips. A Prometheus outage rolls the claim
    back and is retried twice, then the minute is left empty. A quota group whose figures raise is
    left out of the minute (`failed_groups`); the others are recorded."""
    minute = period_start(timezone.now(), INGEST_PERIOD_SECONDS)

    def claim_and_ingest() -> ingestion.IngestReport | None:
        if not claim_period("telemetry.ingest", minute):
            return None
        return ingestion.ingest_minute(minute)

    # The claim and the minute's rows commit together; a lost lock race runs both again.
    report = run_in_transaction(claim_and_ingest, name="telemetry ingestion")
    if report is None:
        logger.info("telemetry %s: already ingested, skipped", minute.isoformat())
        return {"minute": minute.isoformat(), "skipped": "already ran for this minute"}
    logger.info(
        "telemetry %s %s: %d workloads, %d GPUs, %d pools",
        report.source,
        report.minute.isoformat(),
        report.workloads,
        report.gpus,
        report.pools,
    )
    if report.failed_groups:
        logger.error("telemetry %s: quota groups left out: %s", report.minute, report.failed_groups)
    return {
        "minute": report.minute.isoformat(),
        "workloads": report.workloads,
        "failed_groups": report.failed_groups,
    }


@shared_task
def prune_telemetry_task() -> dict[str, object]:
    """Delete minute rows older than 48 h and hour rows older than 400 days, once per hour. Rows a
    delete refuses stay, logged and counted (`failed_rows`, `failed_ids`); the others are deleted."""
    with transaction.atomic():
        if not claim_period("telemetry.prune", period_start(timezone.now(), PRUNE_PERIOD_SECONDS)):
            return {"skipped": "already ran for this hour"}
        report = rollups.prune()
    logger.info(
        "telemetry pruned %d minute rows, %d hour rows", report.minute_rows, report.hour_rows
    )
    return {
        "minute_rows": report.minute_rows,
        "hour_rows": report.hour_rows,
        "failed_rows": report.failures.failed,
        "failed_ids": report.failures.failed_ids,
    }


@shared_task(autoretry_for=(PrometheusError,), retry_backoff=10, retry_kwargs={"max_retries": 2})
def evaluate_gpu_health_task() -> dict[str, object]:
    """Run the GPU health rules on this minute's DCGM readings (scheduling.telemetry.health), once per
    minute (a second run for the same minute skips). Off when TESSERA_HEALTH_RULES_ENABLED is false."""
    if not settings.TESSERA_HEALTH_RULES_ENABLED:
        return {"skipped": "health rules disabled"}
    minute = period_start(timezone.now(), INGEST_PERIOD_SECONDS)

    def claim_and_evaluate() -> health.HealthReport | None:
        if not claim_period("telemetry.health", minute):
            return None
        return health.evaluate_gpu_health(minute)

    # The claim and the minute's decisions commit together (a Prometheus outage rolls both back).
    report = run_in_transaction(claim_and_evaluate, name="gpu health")
    if report is None:
        return {"minute": minute.isoformat(), "skipped": "already ran for this minute"}
    return {
        "minute": minute.isoformat(),
        "readings": report.readings,
        "changes": [f"{c.action} gpu {c.gpu_id}: {c.reason}" for c in report.changes],
        "requeued": list(report.requeued),
    }
