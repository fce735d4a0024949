"""Issue 22: two workloads sharing a GPU get their own use from HAMi's per-container metrics, and an
apportioned, labelled use without them (never the device's figure copied to each tenant), per
workload, per codespace page and per team."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client

from scheduling.models import Workload
from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.models import WorkloadSample
from scheduling.telemetry.prometheus import PrometheusMetrics, Vector
from scheduling.telemetry.services import gpu_use_by_tenant, gpu_use_by_workload
from scheduling.telemetry.tests.fixtures import T0

pytestmark = pytest.mark.django_db
GIB = 1024**3


class StubPrometheus:
    """Answers instant queries from fixed vectors (metric name → vector); unknown names are empty."""

    def __init__(self, vectors: dict[str, Vector]) -> None:
        self.vectors = vectors

    def query(self, promql: str, at: Any = None) -> Vector:
        return self.vectors.get(promql, [])


DEVICE = {
    # GPU-n1-0 (cs-busy + cs-idle, 25 % each) at 20 %; GPU-n1-1 (train, whole) 95 %; GPU-n2-0 (half) 30 %
    "DCGM_FI_DEV_GPU_UTIL": [
        ({"UUID": "GPU-n1-0"}, 20.0),
        ({"UUID": "GPU-n1-1"}, 95.0),
        ({"UUID": "GPU-n2-0"}, 30.0),
    ],
    "DCGM_FI_DEV_FB_USED": [({"UUID": "GPU-n1-0"}, 30000.0)],
}
HAMI = {
    "hami_container_device_utilization_ratio": [
        ({"pod": "cs-busy", "device_uuid": "GPU-n1-0"}, 45.0),
        ({"pod": "cs-idle", "device_uuid": "GPU-n1-0"}, 5.0),
    ],
    "hami_vgpu_memory_used_bytes": [
        ({"pod": "cs-busy", "device_uuid": "GPU-n1-0"}, 10.0 * GIB),
        ({"pod": "cs-idle", "device_uuid": "GPU-n1-0"}, 2.0 * GIB),
    ],
}


def samples() -> dict[str, tuple[float | None, float, str]]:
    return {
        s.workload.name: (s.sm_utilization, s.used_milli, s.attribution)
        for s in WorkloadSample.objects.select_related("workload")
    }


def ingest(vectors: dict[str, Vector]) -> None:
    ingest_minute(T0, PrometheusMetrics("http://unused", client=StubPrometheus(vectors)))  # type: ignore[arg-type]


def test_with_hami_metrics_each_tenant_of_a_shared_gpu_gets_its_own_use(telemetry_cluster):
    ingest({**DEVICE, **HAMI})
    # the card's 20 % (200 milli) split 45:5 → 180 and 20 milli: 72 % and 8 % of each 25 % slice
    assert samples() == {
        "cs-busy": (72.0, 180.0, "container"),
        "cs-idle": (8.0, 20.0, "container"),
        "train": (95.0, 950.0, "device"),
        "half": (60.0, 300.0, "device"),
    }


def test_without_hami_metrics_a_shared_gpu_is_apportioned_by_allocation_and_labelled(
    telemetry_cluster,
):
    ingest(DEVICE)
    # 200 milli split 250:250 → 100 milli each = 40 % of each slice; not 20 % of the card each
    # (the device figure copied), and the sum stays the card's 200 milli
    assert samples() == {
        "cs-busy": (40.0, 100.0, "apportioned"),
        "cs-idle": (40.0, 100.0, "apportioned"),
        "train": (95.0, 950.0, "device"),
        "half": (60.0, 300.0, "device"),
    }
    assert (
        sum(s.used_milli for s in WorkloadSample.objects.filter(workload__name__startswith="cs"))
        == 200.0
    )


def test_per_workload_and_per_team_use_say_how_they_were_found(telemetry_cluster):
    ingest({**DEVICE, **HAMI})
    ingest_minute(
        T0 + timedelta(minutes=1),
        PrometheusMetrics("http://unused", client=StubPrometheus(DEVICE)),  # type: ignore[arg-type]
    )
    w = {x.name: x.pk for x in Workload.objects.all()}
    use = gpu_use_by_workload(w.values(), T0)

    busy = use[w["cs-busy"]]
    assert (busy.allocated_milli, busy.used_milli, busy.minutes) == (250.0, 140.0, 2)
    assert busy.percent == 56.0
    assert busy.label == (
        "partly apportioned (1 of 2 minutes split by allocation, the rest measured)"
    )
    assert use[w["train"]].label == "the device's own figure (the only workload on its GPUs)"

    team_a = telemetry_cluster.quotas["team-a"].tenant_id
    team = gpu_use_by_tenant([team_a], T0)[team_a]
    # team-a holds 250 + 250 + 500 milli; minute 1: 180 + 20 + 300, minute 2: 100 + 100 + 300
    assert (team.allocated_milli, team.used_milli, team.minutes) == (1000.0, 500.0, 2)
    assert team.apportioned_minutes == 1


def test_the_workload_page_labels_an_apportioned_figure(telemetry_cluster, operator):
    ingest(DEVICE)
    client = Client()
    client.force_login(operator)
    busy = Workload.objects.get(name="cs-busy")
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        page = client.get(f"/cluster/workloads/{busy.pk}/").content.decode()
    assert "apportioned: the device&#x27;s use split by allocation" in page
    assert "10 % of a GPU used of 25 % held (40.0 % of its allocation" in page


def test_the_team_waste_page_labels_the_teams_apportioned_use(telemetry_cluster, alice):
    ingest(DEVICE)
    client = Client()
    client.force_login(alice)  # team-a's admin
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        page = client.get("/codespaces/waste/?team=team-a").content.decode()
    section = page.split('data-testid="team-use"')[1].split("</section>")[0]
    # team-a: cs-busy 100 + cs-idle 100 (apportioned) + half 300 milli of 1000 held
    assert "50 % of a GPU used of 100 % held (50.0 % of its allocation" in section
    assert "apportioned: the device&#x27;s use split by allocation" in section
