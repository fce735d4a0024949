"""The Celery application. Tasks are discovered per app (`<app>/tasks.py`)."""

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun
from django.db import connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("tessera")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def close_unusable_connections(**_kwargs: Any) -> None:
    """Before and after every task, as Django does around every request (`close_old_connections`):
    drop connections that had an error or outlived CONN_MAX_AGE, and re-arm the health check
    (CONN_HEALTH_CHECKS), so a session PostgreSQL dropped between two tasks reconnects instead of
    failing the next task. A connection inside a transaction (an eager task run by a caller that
    holds one) belongs to that caller and is left alone."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()
