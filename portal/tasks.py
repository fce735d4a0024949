"""Project-level Celery tasks."""

from __future__ import annotations

from celery import shared_task
from django.db import connection
from django.utils import timezone


@shared_task(name="portal.tasks.health_check_task")
def health_check_task() -> dict[str, str]:
    """Prove that a worker can run a task and reach the database; returns what it saw."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"status": "ok", "database": connection.vendor, "at": timezone.now().isoformat()}
