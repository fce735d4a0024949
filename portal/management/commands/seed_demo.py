"""Load the demo data: tenants and users, the simulated cluster, quota groups and quotas, templates.

Idempotent: re-running keeps existing rows. Each app contributes a `demo.seed(stdout)`; the order matters
(quotas need tenants and nodes; codespace templates need tenants).
"""

from __future__ import annotations

import importlib
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

DEMO_SEEDERS = [
    "portal.demo",
    "scheduling.demo",
    "quotas.demo",
    "codespaces.demo",
    "scheduling.telemetry.demo",
]


class Command(BaseCommand):
    help = "Create demo tenants, users, a simulated cluster, quotas and codespace templates (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            for module_path in DEMO_SEEDERS:
                importlib.import_module(module_path).seed(self.stdout)
