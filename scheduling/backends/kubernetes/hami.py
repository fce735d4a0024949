"""HAMi's wire formats: the devices string, the node lock and the node registration annotation.

Grammar and fields follow k8s-integration.md sections 1.2 and 1.3 (HAMi v2.10.0).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduling.backends.base import GpuBinding

_LOCK_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def gpu_cores_percent(gpu_milli: int) -> int:
    """A GPU share in milli-GPUs as HAMi's per-GPU core percentage (1..100)."""
    return max(1, min(100, gpu_milli // 10))


def encode_container_devices(gpus: Sequence[GpuBinding]) -> str:
    """The `hami.io/vgpu-devices-*` value for a pod with one app container and no init containers:
    `UUID,NVIDIA,MEM_MiB,CORES:` per GPU, then `;` closing the container entry."""
    return (
        "".join(
            f"{gpu.uuid},NVIDIA,{gpu.gpu_memory_mib},{gpu_cores_percent(gpu.gpu_milli)}:"
            for gpu in gpus
        )
        + ";"
    )


def format_node_lock(now: datetime, namespace: str, pod_name: str) -> str:
    """`hami.io/mutex.lock` = `<RFC3339 UTC>,<namespace>,<pod>`."""
    return f"{now.astimezone(UTC).strftime(_LOCK_TIME_FORMAT)},{namespace},{pod_name}"


@dataclass(frozen=True, slots=True)
class NodeLock:
    """A parsed node lock; `taken_at` None = unreadable timestamp (treated as expired)."""

    taken_at: datetime | None
    namespace: str
    pod_name: str

    def is_expired(self, now: datetime, expire_seconds: int) -> bool:
        return self.taken_at is None or (now - self.taken_at).total_seconds() > expire_seconds

    def is_owned_by(self, namespace: str, pod_name: str) -> bool:
        return (self.namespace, self.pod_name) == (namespace, pod_name)


def parse_node_lock(value: str) -> NodeLock:
    """Parse a lock value; HAMi's owner check compares the `,ns,name` suffix, so do we."""
    stamp, _, owner = value.partition(",")
    namespace, _, pod_name = owner.partition(",")
    try:
        taken_at: datetime | None = datetime.strptime(stamp, _LOCK_TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        try:
            taken_at = datetime.fromisoformat(stamp)
        except ValueError:
            taken_at = None
    if taken_at is not None and taken_at.tzinfo is None:
        taken_at = taken_at.replace(tzinfo=UTC)
    return NodeLock(taken_at=taken_at, namespace=namespace, pod_name=pod_name)


@dataclass(frozen=True, slots=True)
class HamiDevice:
    """One GPU from `hami.io/node-nvidia-register`."""

    uuid: str
    index: int
    count: int
    memory_mib: int
    cores: int
    model: str
    numa: int
    mode: str
    healthy: bool


def parse_node_register(value: str) -> list[HamiDevice]:
    """Parse the registration annotation in either format: the JSON array of HAMi >= v2.8 (keys are
    omitempty, so missing ones default to 0/false/"") or the older colon list of <= v2.7
    (7 fields, or 9 from v2.5). The format is told by the first character, as the spec advises.

    Raises ValueError on a malformed value.
    """
    text = value.strip()
    if not text:
        return []
    if text.startswith("["):
        return [_device_from_json(item) for item in json.loads(text)]
    entries = [entry for entry in text.split(":") if entry.strip()]
    return [_device_from_colon(entry, position) for position, entry in enumerate(entries)]


def _device_from_json(item: object) -> HamiDevice:
    if not isinstance(item, dict) or not item.get("id"):
        raise ValueError(f"HAMi register entry without an id: {item!r}")
    return HamiDevice(
        uuid=str(item["id"]),
        index=int(item.get("index", 0)),
        count=int(item.get("count", 0)),
        memory_mib=int(item.get("devmem", 0)),
        cores=int(item.get("devcore", 0)),
        model=str(item.get("type", "")),
        numa=int(item.get("numa", 0)),
        mode=str(item.get("mode", "hami-core") or "hami-core"),
        healthy=bool(item.get("health", False)),
    )


def _device_from_colon(entry: str, position: int) -> HamiDevice:
    """7-field entries predate the index field: their position in the list is the index."""
    fields = entry.split(",")
    if len(fields) not in (7, 9):
        raise ValueError(f"HAMi register entry with {len(fields)} fields (not 7 or 9): {entry!r}")
    uuid, count, devmem, devcore, model, numa, health = fields[:7]
    index, mode = (fields[7], fields[8]) if len(fields) == 9 else (str(position), "hami-core")
    return HamiDevice(
        uuid=uuid,
        index=int(index),
        count=int(count),
        memory_mib=int(devmem),
        cores=int(devcore),
        model=model,
        numa=int(numa),
        mode=mode or "hami-core",
        healthy=health.strip().lower() == "true",
    )
