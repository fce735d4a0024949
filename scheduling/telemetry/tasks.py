"""Celery tasks of telemetry: ingest every minute, prune every hour (beat entries in portal/settings.py)."""

from __future__ import annotations

import logging

from celery import shared_task

from scheduling.telemetry import ingestion, rollups
from scheduling.telemetry.prometheus import PrometheusError

logger = logging.getLogger(__name__)


@shared_task(autoretry_for=(PrometheusError,), retry_backoff=10, retry_kwargs={"max_retries": 2})
def ingest_telemetry_task() -> dict[str, object]:
    """Record this minute's telemetry (simulated or Prometheus) and refresh the hour's rollups.
    Idempotent per minute; a Prometheus outage is retried twice, then the minute is left empty. A quota
    group whose figures raise is left out of the minute (`failed_groups`); the others are recorded."""
    report = ingestion.ingest_minute()
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
def prune_telemetry_task() -> dict[str, int]:
    """Delete minute rows older than 48 h and hour rows older than 400 days."""
    report = rollups.prune()
    logger.info(
        "telemetry pruned %d minute rows, %d hour rows", report.minute_rows, report.hour_rows
    )
    return {"minute_rows": report.minute_rows, "hour_rows": report.hour_rows}
