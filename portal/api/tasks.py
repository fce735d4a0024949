"""Celery tasks of the API layer (imported through CELERY_IMPORTS; scheduled on beat)."""

from __future__ import annotations

from celery import shared_task

from portal.api.idempotency import prune_expired
from portal.api.ratelimit import prune_old_windows


@shared_task(name="portal.api.tasks.prune_api_records_task")
def prune_api_records_task() -> dict[str, int]:
    """Delete expired idempotency records and rate-limit counters of past windows. Safe to run twice."""
    return {"idempotency_records": prune_expired(), "rate_limit_counters": prune_old_windows()}
