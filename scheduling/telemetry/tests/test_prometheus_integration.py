"""Ingestion from a real Prometheus server (Debian package `prometheus`) scraping a small exporter on
loopback that serves DCGM- and HAMi-format metrics for the GPUs of `telemetry_cluster`."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from scheduling.models import Gpu, Workload
from scheduling.telemetry.health_rules import GpuReading
from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.models import GpuSample, Source, WorkloadSample
from scheduling.telemetry.prometheus import (
    PrometheusClient,
    PrometheusError,
    PrometheusHealth,
    PrometheusMetrics,
)
from scheduling.telemetry.tests.fixtures import T0

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

GIB = 1024**3
EXPORTED = f"""\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-n1-0",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"}} 40
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-n1-1",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"}} 95
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-n2-0",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",hostname="n2"}} 30
# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{{gpu="0",UUID="GPU-n1-0",device="nvidia0",Hostname="n1"}} 0.2
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-n1-0",Hostname="n1"}} 30000
DCGM_FI_DEV_FB_USED{{gpu="1",UUID="GPU-n1-1",Hostname="n1"}} 70000
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-n2-0",hostname="n2"}} 20000
# HELP hami_container_device_utilization_ratio Container device utilization.
# TYPE hami_container_device_utilization_ratio gauge
hami_container_device_utilization_ratio{{namespace="tessera-workloads",pod="cs-busy",container="codespace",vdevice_index="0",device_uuid="GPU-n1-0"}} 45
hami_container_device_utilization_ratio{{namespace="tessera-workloads",pod="cs-idle",container="codespace",vdevice_index="0",device_uuid="GPU-n1-0"}} 5
# HELP hami_vgpu_memory_used_bytes vGPU memory used.
# TYPE hami_vgpu_memory_used_bytes gauge
hami_vgpu_memory_used_bytes{{namespace="tessera-workloads",pod="cs-busy",container="codespace",vdevice_index="0",device_uuid="GPU-n1-0"}} {10 * GIB}
hami_vgpu_memory_used_bytes{{namespace="tessera-workloads",pod="cs-idle",container="codespace",vdevice_index="0",device_uuid="GPU-n1-0"}} {2 * GIB}
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="GPU-n1-0",Hostname="n1",err_code="79",err_msg="GPU has fallen off the bus"}} 79
DCGM_FI_DEV_XID_ERRORS{{gpu="1",UUID="GPU-n1-1",Hostname="n1"}} 0
DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="GPU-n2-0",hostname="n2"}} 0
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-n1-0",Hostname="n1"}} 41
DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="GPU-n1-1",Hostname="n1"}} 96
DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-n2-0",hostname="n2"}} 58
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-n1-0",Hostname="n1"}} 61.5
DCGM_FI_DEV_POWER_USAGE{{gpu="1",UUID="GPU-n1-1",Hostname="n1"}} 398.25
DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-n2-0",hostname="n2"}} 210
# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.
# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{gpu="0",UUID="GPU-n1-0",Hostname="n1"}} 0
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{gpu="1",UUID="GPU-n1-1",Hostname="n1"}} 0
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{gpu="0",UUID="GPU-n2-0",hostname="n2"}} 3
# HELP DCGM_FI_DEV_ROW_REMAP_FAILURE Whether remapping of rows has failed.
# TYPE DCGM_FI_DEV_ROW_REMAP_FAILURE gauge
DCGM_FI_DEV_ROW_REMAP_FAILURE{{gpu="0",UUID="GPU-n1-0",Hostname="n1"}} 0
DCGM_FI_DEV_ROW_REMAP_FAILURE{{gpu="1",UUID="GPU-n1-1",Hostname="n1"}} 0
DCGM_FI_DEV_ROW_REMAP_FAILURE{{gpu="0",UUID="GPU-n2-0",hostname="n2"}} 0
# HELP DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS Number of remapped rows for uncorrectable errors.
# TYPE DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS counter
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{gpu="0",UUID="GPU-n2-0",hostname="n2"}} 2
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = EXPORTED.encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip(
            "needs the prometheus binary (Debian package `prometheus`; .ci/run installs it)"
        )
    exporter = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: gpu\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter.server_address[1]}']\n"
    )
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
    )
    url = f"http://127.0.0.1:{port}"
    client = PrometheusClient(url, timeout=2)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if (
                    len(client.query("hami_vgpu_memory_used_bytes")) == 2
                    and client.query("DCGM_FI_DEV_FB_USED")
                    and client.query("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")
                ):
                    break
            except PrometheusError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                log = (tmp_path / "prometheus.log").read_text()[-2000:]
                pytest.fail(f"prometheus did not scrape the exporter in time:\n{log}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        exporter.shutdown()


def test_ingestion_joins_dcgm_and_hami_through_prometheus(telemetry_cluster, prometheus):
    # given: the exporter's figures scraped by a real Prometheus
    report = ingest_minute(T0, PrometheusMetrics(prometheus))

    # then: shared card GPU-n1-0 (SM active 0.2 = 20 %) is split 45:5 between the two codespaces,
    # as a percentage of each 25 % slice; whole and single-tenant cards take the device figure
    assert report.source == Source.PROMETHEUS
    samples = {
        s.workload.name: (s.sm_utilization, s.memory_used_mib, s.used_milli, s.source)
        for s in WorkloadSample.objects.select_related("workload")
    }
    assert samples == {
        "cs-busy": (72.0, 10240, 180.0, "prometheus"),
        "cs-idle": (8.0, 2048, 20.0, "prometheus"),
        "train": (95.0, 70000, 950.0, "prometheus"),
        "half": (60.0, 20000, 300.0, "prometheus"),
    }
    gpus = {
        g.gpu.uuid: (g.sm_utilization, g.memory_used_mib, g.allocated_milli)
        for g in GpuSample.objects.select_related("gpu")
    }
    assert gpus == {
        "GPU-n1-0": (20.0, 30000, 500),
        "GPU-n1-1": (95.0, 70000, 1000),
        "GPU-n2-0": (30.0, 20000, 500),
        "GPU-n2-1": (0.0, 0, 0),
    }


def test_the_beat_task_reads_prometheus_when_configured(telemetry_cluster, prometheus, settings):
    from scheduling.telemetry.tasks import ingest_telemetry_task

    settings.TESSERA_PROMETHEUS_URL = prometheus
    result = ingest_telemetry_task()
    assert result["workloads"] == 4
    assert set(WorkloadSample.objects.values_list("source", flat=True)) == {"prometheus"}


def test_health_readings_come_from_dcgm_through_prometheus(telemetry_cluster, prometheus):
    # given the exporter's health figures scraped by a real Prometheus (GPU-n2-1 exports none)
    gpus = list(Gpu.objects.select_related("node").order_by("node__name", "index"))
    by_id = {g.pk: g.uuid for g in gpus}

    readings = PrometheusHealth(prometheus).read(gpus)

    assert {by_id[r.gpu_id]: r for r in readings} == {
        "GPU-n1-0": GpuReading(by_uuid_pk(gpus, "GPU-n1-0"), "n1", 79, 41.0, 61.5, 0.0, 0.0, None),
        "GPU-n1-1": GpuReading(by_uuid_pk(gpus, "GPU-n1-1"), "n1", 0, 96.0, 398.25, 0.0, 0.0, None),
        "GPU-n2-0": GpuReading(by_uuid_pk(gpus, "GPU-n2-0"), "n2", 0, 58.0, 210.0, 3.0, 0.0, 2.0),
    }


def by_uuid_pk(gpus, uuid):
    return next(g.pk for g in gpus if g.uuid == uuid)


def test_the_health_task_takes_out_the_gpus_prometheus_reports_failing(
    telemetry_cluster, prometheus, settings
):
    from scheduling.telemetry.tasks import evaluate_gpu_health_task

    settings.TESSERA_PROMETHEUS_URL = prometheus
    result = evaluate_gpu_health_task()

    # XID 79 on GPU-n1-0 and 3 double-bit ECC errors on GPU-n2-0 take them out at once; GPU-n1-1 at
    # 96 °C is one reading above the limit, not yet three (hold-down)
    assert result["readings"] == 3
    healthy = dict(Gpu.objects.values_list("uuid", "healthy"))
    assert healthy == {"GPU-n1-0": False, "GPU-n1-1": True, "GPU-n2-0": False, "GPU-n2-1": False}
    assert sorted(result["changes"]) == sorted(
        [
            f"mark_unhealthy gpu {by_uuid_pk(Gpu.objects.all(), 'GPU-n1-0')}: "
            "XID 79: GPU has fallen off the bus (DCGM_FI_DEV_XID_ERRORS)",
            f"mark_unhealthy gpu {by_uuid_pk(Gpu.objects.all(), 'GPU-n2-0')}: "
            "3 double-bit ECC errors (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)",
        ]
    )
    requeued = set(
        Workload.objects.filter(pk__in=result["requeued"]).values_list("name", flat=True)
    )
    assert requeued == {"cs-busy", "cs-idle", "half"}


def test_unreachable_prometheus_is_a_transient_error():
    with pytest.raises(PrometheusError) as excinfo:
        PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout=1).query("up")
    assert "Prometheus at http://127.0.0.1:" in str(excinfo.value)
