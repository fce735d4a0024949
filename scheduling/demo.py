"""Demo data of the scheduling app: the simulated cluster's inventory (idempotent).

Loads `TESSERA_SIM_INVENTORY` ("demo" = the bundled 24-node cluster: pool `training` with H100/A100 nodes,
pool `interactive` with L40S/T4 nodes, each with CPU-only nodes) into Node/Gpu rows. Quota groups select
the pools with `{"pool": "training"}` / `{"pool": "interactive"}` (quotas.demo).
"""

from __future__ import annotations

from typing import TextIO

from django.conf import settings

from scheduling.inventory import load_configured_inventory, sync_inventory_rows
from scheduling.models import Gpu, Node


def seed(stdout: TextIO) -> None:
    if settings.TESSERA_BACKEND != "simulated":
        stdout.write(
            "Cluster: TESSERA_BACKEND is not simulated; nodes come from the cluster's sync.\n"
        )
        return
    inventory = load_configured_inventory(settings.TESSERA_SIM_INVENTORY)
    report = sync_inventory_rows(inventory)
    pools: dict[str, int] = {}
    for node in Node.objects.all():
        pools[node.pool or "-"] = pools.get(node.pool or "-", 0) + 1
    stdout.write(
        f"Simulated cluster ({settings.TESSERA_SIM_INVENTORY}): {Node.objects.count()} nodes, "
        f"{Gpu.objects.count()} GPUs ({report.created_nodes} nodes added); pools: "
        + ", ".join(f"{p}={n}" for p, n in sorted(pools.items()))
        + "\n"
    )
