"""Load the demo data: tenants and users, the simulated cluster, quota groups and quotas, templates.

Idempotent: re-running keeps existing rows. Each app contributes a `demo.seed(stdout)` (or another
function of its demo module, `module:function`); the order matters (quotas need tenants and nodes;
codespace templates need tenants; the recorded demand needs quotas).
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
    "scheduling.demo:seed_demand_history",
    "codespaces.demo",
    "scheduling.telemetry.demo",
]


class Command(BaseCommand):
    help = "Create demo tenants, users, a simulated cluster, quotas and codespace templates (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            for seeder in DEMO_SEEDERS:
                module_path, _, function = seeder.partition(":")
                getattr(importlib.import_module(module_path), function or "seed")(self.stdout)
