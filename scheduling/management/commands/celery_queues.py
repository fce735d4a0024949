"""Print the comma-separated Celery queues a worker must consume (default + one per scheduling shard)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from scheduling.queues import worker_queues


class Command(BaseCommand):
    help = "Print the Celery queues a worker should consume, comma-separated."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(",".join(worker_queues()))
