"""Cluster inventory: load it (the bundled demo cluster or an openb-style node CSV) and upsert Node/Gpu rows.

Inventories are read into the backend's plain `NodeInventory` dataclasses, so the simulated backend, the
Kubernetes backend and the loaders all feed the same `sync_inventory_rows` upsert.
"""

from __future__ import annotations

import csv
import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from quotas.usage import log_overlaps
from scheduling.backends.base import GpuInventory, NodeInventory

logger = logging.getLogger(__name__)

DEMO_INVENTORY_PATH = Path(__file__).resolve().parent / "data" / "demo_inventory.json"

#: Memory (MiB) per GPU of the models found in openb traces and the demo cluster.
GPU_MEMORY_MIB = {
    "H100": 81920,
    "A100": 81920,
    "L40S": 46080,
    "A10": 24576,
    "T4": 15360,
    "P100": 16384,
    "V100M16": 16384,
    "V100M32": 32768,
    "G2": 16384,
    "G3": 32768,
}
DEFAULT_GPU_MEMORY_MIB = 16384


class InventoryError(ValueError):
    """An inventory file is missing or malformed (the message names the file and the line)."""


def _gpu_uuid(node: str, index: int) -> str:
    """A stable UUID per (node, GPU index), so re-loading an inventory keeps the same rows."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.gpu{index}.tessera"))


def load_demo_inventory() -> list[NodeInventory]:
    """The bundled 24-node demo cluster (H100/A100 training pool, L40S/T4 interactive pool)."""
    return load_json_inventory(DEMO_INVENTORY_PATH)


def load_json_inventory(path: Path) -> list[NodeInventory]:
    """Read a JSON inventory: `{"nodes": [{"name", "labels", "taints", "cpu_milli", "memory_mib",
    "gpu_model", "gpus": [{"index", "model", "memory_mib", "numa_node", "nvlink_group"}]}]}`."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InventoryError(f"{path}: {exc}") from exc
    nodes = []
    for n in data.get("nodes", []):
        gpus = tuple(
            GpuInventory(
                index=int(g["index"]),
                uuid=g.get("uuid") or _gpu_uuid(n["name"], int(g["index"])),
                model=g["model"],
                memory_mib=int(g["memory_mib"]),
                numa_node=int(g.get("numa_node", 0)),
                nvlink_group=int(g.get("nvlink_group", 0)),
            )
            for g in n.get("gpus", [])
        )
        nodes.append(
            NodeInventory(
                name=n["name"],
                cpu_milli=int(n["cpu_milli"]),
                memory_mib=int(n["memory_mib"]),
                gpu_model=n.get("gpu_model", ""),
                labels=tuple(sorted((str(k), str(v)) for k, v in n.get("labels", {}).items())),
                taints=tuple(n.get("taints", [])),
                gpus=gpus,
            )
        )
    return nodes


def load_openb_csv(path: Path, *, pool: str = "openb") -> list[NodeInventory]:
    """Read an openb node list (`sn,cpu_milli,memory_mib,gpu,model`). GPUs of a node are split over two
    NUMA nodes and NVLink groups of up to 4 when it has 8; every node gets the label `pool=<pool>`."""
    nodes = []
    try:
        with Path(path).open(newline="") as fh:
            for lineno, row in enumerate(csv.DictReader(fh), start=2):
                try:
                    name = row["sn"].strip()
                    count = int(row.get("gpu") or 0)
                    model = (row.get("model") or "").strip()
                    cpu = int(row["cpu_milli"])
                    mem = int(row["memory_mib"])
                except (KeyError, ValueError, AttributeError) as exc:
                    raise InventoryError(f"{path}:{lineno}: bad row {row!r} ({exc})") from exc
                per_numa = max(1, count // 2)
                gpus = tuple(
                    GpuInventory(
                        index=i,
                        uuid=_gpu_uuid(name, i),
                        model=model,
                        memory_mib=GPU_MEMORY_MIB.get(model, DEFAULT_GPU_MEMORY_MIB),
                        numa_node=i // per_numa if count > 1 else 0,
                        nvlink_group=i // 4,
                    )
                    for i in range(count)
                )
                labels = {"pool": pool}
                if model and count:
                    labels["gpu-model"] = model
                nodes.append(
                    NodeInventory(
                        name=name,
                        cpu_milli=cpu,
                        memory_mib=mem,
                        gpu_model=model if count else "",
                        labels=tuple(sorted(labels.items())),
                        gpus=gpus,
                    )
                )
    except OSError as exc:
        raise InventoryError(f"{path}: {exc}") from exc
    return nodes


def load_configured_inventory(source: str) -> list[NodeInventory]:
    """`TESSERA_SIM_INVENTORY`: "demo" (the bundled cluster), a `.json` inventory or an openb `.csv`."""
    if source in ("", "demo"):
        return load_demo_inventory()
    path = Path(source)
    if path.suffix.lower() == ".csv":
        return load_openb_csv(path)
    return load_json_inventory(path)


@dataclass(frozen=True)
class SyncReport:
    """What an inventory upsert changed."""

    created_nodes: int
    updated_nodes: int
    created_gpus: int
    updated_gpus: int

    @property
    def changed(self) -> bool:
        return bool(
            self.created_nodes or self.updated_nodes or self.created_gpus or self.updated_gpus
        )


def sync_inventory_rows(
    inventory: Sequence[NodeInventory], *, keep_operator_state: bool = True
) -> SyncReport:
    """Upsert Node and Gpu rows from an inventory (idempotent; nodes missing from it are left alone).

    Operator state (cordon, GPU/node health) is kept when `keep_operator_state`, so a re-sync never undoes
    a cordon. Bumps every shard's version when something changed, so cached snapshots are rebuilt.
    """
    from scheduling.models import Gpu, Node
    from scheduling.services.snapshot import bump_all_shards

    created_nodes = updated_nodes = created_gpus = updated_gpus = 0
    with transaction.atomic():
        # only the inventory's nodes: a chunk of a large inventory reads its own rows, not all
        names = [inv.name for inv in inventory]
        existing = {n.name: n for n in Node.objects.filter(name__in=names)}
        gpus_by_node: dict[int, dict[int, Gpu]] = {}
        for row0 in Gpu.objects.filter(node__in=list(existing.values())):
            gpus_by_node.setdefault(row0.node_id, {})[row0.index] = row0
        new_gpus: list[Gpu] = []
        relabelled: set[str] = set()
        for inv in inventory:
            labels = dict(inv.labels)
            fields = {
                "pool": labels.get("pool", ""),
                "labels": labels,
                "taints": list(inv.taints),
                "cpu_milli": inv.cpu_milli,
                "memory_mib": inv.memory_mib,
                "gpu_model": inv.gpu_model or (inv.gpus[0].model if inv.gpus else ""),
            }
            node = existing.get(inv.name)
            if node is None:
                node = Node.objects.create(name=inv.name, cordoned=inv.cordoned, **fields)
                created_nodes += 1
                relabelled.add(node.name)
            else:
                changed = [k for k, v in fields.items() if getattr(node, k) != v]
                if "labels" in changed:
                    relabelled.add(node.name)
                if not keep_operator_state and node.cordoned != inv.cordoned:
                    node.cordoned = inv.cordoned
                    changed.append("cordoned")
                if changed:
                    for k in changed:
                        if k in fields:
                            setattr(node, k, fields[k])
                    node.save(update_fields=[*changed, "updated_at"])
                    updated_nodes += 1
            have = gpus_by_node.get(node.pk, {})
            for g in inv.gpus:
                row: Gpu | None = have.get(g.index)
                if row is None:
                    new_gpus.append(
                        Gpu(
                            node=node,
                            index=g.index,
                            uuid=g.uuid or _gpu_uuid(inv.name, g.index),
                            model=g.model,
                            memory_mib=g.memory_mib,
                            numa_node=g.numa_node,
                            nvlink_group=g.nvlink_group,
                            healthy=g.healthy,
                            mig_layout=[list(i) for i in g.mig_layout],
                        )
                    )
                    created_gpus += 1
                    continue
                gfields = {
                    "model": g.model,
                    "memory_mib": g.memory_mib,
                    "numa_node": g.numa_node,
                    "nvlink_group": g.nvlink_group,
                    "mig_layout": [list(i) for i in g.mig_layout],
                }
                if row.mig_dynamic:
                    # Tessera owns a dynamic card's layout (scheduling.services.mig_reconfig)
                    del gfields["mig_layout"]
                gchanged = [k for k, v in gfields.items() if getattr(row, k) != v]
                if gchanged:
                    for k in gchanged:
                        setattr(row, k, gfields[k])
                    row.save(update_fields=gchanged)
                    updated_gpus += 1
        Gpu.objects.bulk_create(new_gpus, batch_size=1000)
        report = SyncReport(created_nodes, updated_nodes, created_gpus, updated_gpus)
        if report.changed:
            bump_all_shards()
            logger.info("inventory sync: %s", report)
        if relabelled:
            # New or relabelled nodes two groups now match: counted in the oldest, operators told.
            log_overlaps(relabelled)
    return report


def node_inventory_names(inventory: Iterable[NodeInventory]) -> set[str]:
    return {n.name for n in inventory}
