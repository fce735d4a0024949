"""Telemetry from a Prometheus server's HTTP API (`/api/v1/query`) for real clusters.

Per GPU (joined on the GPU UUID, `Gpu.uuid`): DCGM exporter device metrics — `DCGM_FI_PROF_SM_ACTIVE`
(0–1, when the profiling counters are enabled) else `DCGM_FI_DEV_GPU_UTIL` (%), and `DCGM_FI_DEV_FB_USED`
(MiB). The UUID label is `UUID` (`gpu_uuid` on NVLink templates).

Per workload: DCGM cannot attribute a shared GPU to pods under HAMi (k8s-integration.md §6.5), so shares
come from our own placements and the split from HAMi's per-container metrics on that UUID
(`hami_container_device_utilization_ratio` SM %, `hami_vgpu_memory_used_bytes`; legacy
`Device_utilization_desc_of_container` / `vGPU_device_memory_usage_in_bytes` too):

    workload SM (% of card) = device SM × container SM% / Σ container SM% on the UUID

and, as a percentage of the workload's own allocation, × 1000 / allocated milli, capped at 100. Without
HAMi metrics on a shared card the device figure is split by allocated milli. A GPU held whole by one
workload needs no split.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from core.units import MILLI_PER_GPU
from scheduling.models import Gpu
from scheduling.telemetry.health_rules import GpuReading
from scheduling.telemetry.models import Attribution, Source
from scheduling.telemetry.samples import MinuteMetrics, Share

TIMEOUT_SECONDS = 10.0

UUID_LABELS = ("UUID", "uuid", "gpu_uuid", "device_uuid", "deviceuuid")
POD_LABELS = ("pod", "podname", "pod_name")
CONTAINER_UTIL = ("hami_container_device_utilization_ratio", "Device_utilization_desc_of_container")
CONTAINER_MEMORY = ("hami_vgpu_memory_used_bytes", "vGPU_device_memory_usage_in_bytes")


class PrometheusError(Exception):
    """Prometheus did not answer, or answered with an error (transient: the task retries)."""


Vector = list[tuple[dict[str, str], float]]


class PrometheusClient:
    """A small client of the Prometheus HTTP API (instant queries only)."""

    def __init__(self, base_url: str, timeout: float = TIMEOUT_SECONDS) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def query(self, promql: str, at: datetime | None = None) -> Vector:
        """Run an instant query; return (labels, value) pairs of the resulting vector."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        url = f"{self.base_url}/api/v1/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as response:  # noqa: S310
                body = json.loads(response.read().decode())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise PrometheusError(f"Prometheus at {self.base_url}: {exc}") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"Prometheus query {promql!r}: {body.get('error', body)}")
        data = body.get("data", {})
        if data.get("resultType") != "vector":
            return []
        out: Vector = []
        for item in data.get("result", []):
            try:
                out.append((dict(item["metric"]), float(item["value"][1])))
            except (KeyError, IndexError, ValueError):
                continue
        return out


def _label(labels: dict[str, str], names: Sequence[str]) -> str:
    for name in names:
        if labels.get(name):
            return labels[name]
    return ""


def by_uuid(vector: Vector) -> dict[str, float]:
    """Value per GPU UUID (the last one wins when an exporter repeats a device)."""
    out: dict[str, float] = {}
    for labels, value in vector:
        uuid = _label(labels, UUID_LABELS)
        if uuid:
            out[uuid] = value
    return out


def by_uuid_and_pod(vectors: Sequence[Vector]) -> dict[tuple[str, str], float]:
    """Sum per (GPU UUID, pod) over containers, from the first vector that has any sample."""
    for vector in vectors:
        out: dict[tuple[str, str], float] = defaultdict(float)
        for labels, value in vector:
            uuid = _label(labels, UUID_LABELS)
            pod = _label(labels, POD_LABELS)
            if uuid and pod:
                out[(uuid, pod)] += value
        if out:
            return dict(out)
    return {}


class PrometheusMetrics:
    """A `MetricsSource` reading DCGM and HAMi metrics through Prometheus."""

    source = Source.PROMETHEUS

    def __init__(self, base_url: str, client: PrometheusClient | None = None) -> None:
        self.client = client or PrometheusClient(base_url)

    def measure(
        self, minute: datetime, shares: Sequence[Share], gpus: Sequence[Gpu]
    ) -> MinuteMetrics:
        at = None  # the latest value; ingestion runs every minute
        sm_active = by_uuid(self.client.query("DCGM_FI_PROF_SM_ACTIVE", at))
        gpu_util = by_uuid(self.client.query("DCGM_FI_DEV_GPU_UTIL", at))
        fb_used = by_uuid(self.client.query("DCGM_FI_DEV_FB_USED", at))
        container_util = by_uuid_and_pod([self.client.query(n, at) for n in CONTAINER_UTIL])
        container_memory = by_uuid_and_pod([self.client.query(n, at) for n in CONTAINER_MEMORY])
        return attribute(
            shares, gpus, sm_active, gpu_util, fb_used, container_util, container_memory
        )


def attribution_of(ways: set[str]) -> str:
    """One label for a workload over its GPUs: apportioned if any of its cards was split by
    allocation (the figure is then an estimate), else measured per container if any card was shared,
    else the device's own figure."""
    for label in (Attribution.APPORTIONED, Attribution.CONTAINER, Attribution.DEVICE):
        if label in ways:
            return str(label)
    return ""


def attribute(
    shares: Sequence[Share],
    gpus: Sequence[Gpu],
    sm_active: dict[str, float],
    gpu_util: dict[str, float],
    fb_used_mib: dict[str, float],
    container_util: dict[tuple[str, str], float],
    container_memory_bytes: dict[tuple[str, str], float],
) -> MinuteMetrics:
    """Join device metrics (per UUID) with placements and HAMi container metrics (module docstring).

    Pure: tested on fixed numbers. `sm_active` is 0–1 (DCGM profiling), `gpu_util` percent; SM active
    wins when present for a UUID."""
    out = MinuteMetrics()
    device_percent: dict[str, float] = {}
    for gpu in gpus:
        if gpu.uuid in sm_active:
            device_percent[gpu.uuid] = sm_active[gpu.uuid] * 100
        elif gpu.uuid in gpu_util:
            device_percent[gpu.uuid] = gpu_util[gpu.uuid]
        if gpu.uuid in device_percent:
            out.gpu_utilization[gpu.pk] = round(device_percent[gpu.uuid], 3)
        if gpu.uuid in fb_used_mib:
            out.gpu_memory_mib[gpu.pk] = int(fb_used_mib[gpu.uuid])

    on_gpu: dict[str, list[Share]] = defaultdict(list)
    for share in shares:
        on_gpu[share.gpu_uuid].append(share)

    # percent-of-card used per workload, summed over its GPUs, and its allocation
    card_percent: dict[int, float] = defaultdict(float)
    allocated: dict[int, int] = defaultdict(int)
    measured: set[int] = set()
    how: dict[int, set[str]] = defaultdict(set)
    memory: dict[int, int] = defaultdict(int)
    for uuid, members in on_gpu.items():
        device = device_percent.get(uuid)
        weights = {s.workload_id: container_util.get((uuid, s.workload_name)) for s in members}
        known = {k: v for k, v in weights.items() if v is not None}
        total_container = sum(known.values())
        total_milli = sum(s.gpu_milli for s in members)
        for share in members:
            allocated[share.workload_id] += share.gpu_milli
            if device is not None:
                if len(members) == 1:
                    part = device
                    how[share.workload_id].add(Attribution.DEVICE)
                elif len(known) == len(members) and total_container > 0:
                    part = device * known[share.workload_id] / total_container
                    how[share.workload_id].add(Attribution.CONTAINER)
                elif len(known) == len(members):
                    part = 0.0
                    how[share.workload_id].add(Attribution.CONTAINER)
                else:
                    part = device * share.gpu_milli / total_milli
                    how[share.workload_id].add(Attribution.APPORTIONED)
                card_percent[share.workload_id] += part
                measured.add(share.workload_id)
            used_bytes = container_memory_bytes.get((uuid, share.workload_name))
            if used_bytes is not None:
                memory[share.workload_id] += int(used_bytes / (1024 * 1024))
            elif uuid in fb_used_mib:
                mem_total = sum(s.gpu_memory_mib for s in members) or len(members)
                weight = share.gpu_memory_mib if mem_total != len(members) else 1
                memory[share.workload_id] += int(fb_used_mib[uuid] * weight / mem_total)
    for workload_id in measured:
        own = card_percent[workload_id] * MILLI_PER_GPU / allocated[workload_id]
        out.workload_utilization[workload_id] = round(min(own, 100.0), 3)
        out.workload_attribution[workload_id] = attribution_of(how[workload_id])
    out.workload_memory_mib = dict(memory)
    return out


# GPU health (dcgm-exporter's default counters): the last XID, temperature, power, ECC and row remapping.
HEALTH_METRICS = {
    "xid": "DCGM_FI_DEV_XID_ERRORS",
    "temperature_c": "DCGM_FI_DEV_GPU_TEMP",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
    "ecc_dbe_total": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "row_remap_failure": "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "uncorrectable_remapped_rows": "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
}


class PrometheusHealth:
    """Health readings of every GPU from dcgm-exporter's metrics through Prometheus (joined on UUID)."""

    def __init__(self, base_url: str, client: PrometheusClient | None = None) -> None:
        self.client = client or PrometheusClient(base_url)

    def read(self, gpus: Sequence[Gpu]) -> list[GpuReading]:
        values = {field: by_uuid(self.client.query(name)) for field, name in HEALTH_METRICS.items()}
        return health_readings(gpus, values)


def health_readings(gpus: Sequence[Gpu], values: dict[str, dict[str, float]]) -> list[GpuReading]:
    """One reading per GPU that has at least one health metric (pure: tested on fixed numbers)."""
    out = []
    for gpu in gpus:
        found = {
            field: per_uuid[gpu.uuid] for field, per_uuid in values.items() if gpu.uuid in per_uuid
        }
        if not found:
            continue
        xid = found.pop("xid", None)
        out.append(
            GpuReading(
                gpu_id=gpu.pk,
                node=gpu.node.name,
                xid=int(xid) if xid is not None else None,
                **found,
            )
        )
    return out
