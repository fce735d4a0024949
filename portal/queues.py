"""Celery queue names of the foundation: `default`. The scheduling app adds one queue per shard
(scheduling.queues.worker_queues lists both)."""

from __future__ import annotations

DEFAULT_QUEUES = ("default",)
