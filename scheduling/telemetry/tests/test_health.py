"""GPU health rules applied: an XID 79 takes the GPU out through the operator services (requeue,
audit as the system, operators told), the reason shows on the node page, a flapping metric does not
flap the GPU, and an operator's "healthy" is respected."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.test import Client

from portal.models import OperatorAction
from scheduling.choices import WorkloadState
from scheduling.models import Gpu, Node, Workload
from scheduling.services.operator import set_gpu_health
from scheduling.telemetry.health import evaluate_gpu_health
from scheduling.telemetry.health_rules import GpuReading, HealthPolicy
from scheduling.telemetry.models import GpuHealth, GpuHealthEvent
from scheduling.telemetry.prometheus import health_readings
from scheduling.telemetry.tests.fixtures import T0

pytestmark = pytest.mark.django_db


class FixedHealth:
    """Health readings given per GPU UUID; every other GPU reads nominal."""

    def __init__(self, by_uuid: dict[str, dict[str, float]]) -> None:
        self.by_uuid = by_uuid

    def read(self, gpus: Sequence[Gpu]) -> list[GpuReading]:
        values: dict[str, dict[str, float]] = {"xid": {}, "temperature_c": {}, "power_w": {}}
        for gpu in gpus:
            figures = {"xid": 0.0, "temperature_c": 60.0, "power_w": 300.0}
            figures.update(self.by_uuid.get(gpu.uuid, {}))
            for key, value in figures.items():
                values.setdefault(key, {})[gpu.uuid] = value
        return health_readings(gpus, values)


def states(*names: str) -> dict[str, str]:
    return dict(Workload.objects.filter(name__in=names).values_list("name", "state"))


def test_xid_79_marks_the_gpu_unhealthy_requeues_its_workloads_and_tells_operators(
    telemetry_cluster: Any,
    settings: Any,
    operator: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.TESSERA_OPERATOR_EMAILS = ["oncall@example.com"]
    with django_capture_on_commit_callbacks(execute=True):
        report = evaluate_gpu_health(T0, FixedHealth({"GPU-n1-0": {"xid": 79}}))

    gpu = Gpu.objects.get(uuid="GPU-n1-0")
    assert gpu.healthy is False
    # exactly the two codespaces on that card are requeued; the whole-GPU job on GPU 1 stays
    assert states("cs-busy", "cs-idle", "train") == {
        "cs-busy": WorkloadState.PENDING,
        "cs-idle": WorkloadState.PENDING,
        "train": WorkloadState.RUNNING,
    }
    ids = sorted(
        Workload.objects.filter(name__in=["cs-busy", "cs-idle"]).values_list("pk", flat=True)
    )
    assert list(report.requeued) == ids
    # the workload's page says why it moved
    client = Client()
    client.force_login(operator)
    busy = Workload.objects.get(name="cs-busy")
    html = client.get(f"/cluster/workloads/{busy.pk}/").content.decode()
    assert "Health rule: XID 79: GPU has fallen off the bus (DCGM_FI_DEV_XID_ERRORS)" in html

    # audited as the system (no actor), with the reason and the requeued workloads
    entry = OperatorAction.objects.get()
    assert (entry.actor, entry.action, entry.target_id) == (None, "gpu_unhealthy", gpu.pk)
    assert (
        entry.reason == "Health rule: XID 79: GPU has fallen off the bus (DCGM_FI_DEV_XID_ERRORS)"
    )
    assert sorted(entry.impact["workloads"]) == ids

    event = GpuHealthEvent.objects.get()
    assert (event.gpu_id, event.action, event.rule, event.value) == (
        gpu.pk,
        "mark_unhealthy",
        "xid",
        79.0,
    )
    assert event.requeued == ids
    assert len(mail.outbox) == 1
    assert mail.outbox[0].subject == (
        "[tessera] GPU 0 of n1 marked unhealthy: XID 79: GPU has fallen off the bus "
        "(DCGM_FI_DEV_XID_ERRORS)"
    )
    assert mail.outbox[0].to == ["oncall@example.com"]
    assert GpuHealth.objects.get(gpu=gpu).xid == 79


def test_the_node_page_shows_each_gpus_health_history_with_the_reason(
    telemetry_cluster: Any, operator: Any
) -> None:
    evaluate_gpu_health(T0, FixedHealth({"GPU-n1-0": {"xid": 79, "temperature_c": 71}}))
    client = Client()
    client.force_login(operator)
    node = Node.objects.get(name="n1")

    page = client.get(f"/cluster/nodes/{node.pk}/").content.decode()

    assert 'data-testid="gpu-health-history"' in page
    assert "XID 79: GPU has fallen off the bus (DCGM_FI_DEV_XID_ERRORS)" in page
    assert "Marked unhealthy" in page
    assert "71 °C" in page


def test_a_flapping_temperature_does_not_flap_the_gpu(telemetry_cluster: Any) -> None:
    policy = HealthPolicy(trip_after=3, clear_after=5)
    for minute in range(12):
        temperature = 93.0 if minute % 2 == 0 else 88.0
        evaluate_gpu_health(
            T0 + timedelta(minutes=minute),
            FixedHealth({"GPU-n1-1": {"temperature_c": temperature}}),
            policy,
        )
    assert Gpu.objects.get(uuid="GPU-n1-1").healthy is True
    assert GpuHealthEvent.objects.count() == 0
    assert states("train") == {"train": WorkloadState.RUNNING}


def test_a_hot_gpu_trips_after_the_hold_down_and_recovers_by_itself(telemetry_cluster: Any) -> None:
    policy = HealthPolicy(trip_after=3, clear_after=2)
    temps = [95.0, 95.0, 95.0, 70.0, 70.0]
    healthy = []
    for minute, temperature in enumerate(temps):
        evaluate_gpu_health(
            T0 + timedelta(minutes=minute),
            FixedHealth({"GPU-n1-1": {"temperature_c": temperature}}),
            policy,
        )
        healthy.append(Gpu.objects.get(uuid="GPU-n1-1").healthy)
    assert healthy == [True, True, False, False, True]
    assert list(GpuHealthEvent.objects.order_by("ts").values_list("action", "reason")) == [
        ("mark_unhealthy", "temperature 95 °C above 90 °C for 3 readings (DCGM_FI_DEV_GPU_TEMP)"),
        ("mark_healthy", "temperature below 80 °C for 2 readings (DCGM_FI_DEV_GPU_TEMP)"),
    ]
    assert list(OperatorAction.objects.order_by("id").values_list("action", flat=True)) == [
        "gpu_unhealthy",
        "gpu_healthy",
    ]


def test_an_operator_marking_the_gpu_healthy_acknowledges_the_xid_showing(
    telemetry_cluster: Any,
) -> None:
    source = FixedHealth({"GPU-n1-0": {"xid": 79}})
    evaluate_gpu_health(T0, source)
    gpu = Gpu.objects.get(uuid="GPU-n1-0")
    set_gpu_health(gpu.pk, healthy=True, reason="reset the card")

    evaluate_gpu_health(T0 + timedelta(minutes=1), source)
    assert Gpu.objects.get(pk=gpu.pk).healthy is True
    evaluate_gpu_health(T0 + timedelta(minutes=2), FixedHealth({"GPU-n1-0": {"xid": 48}}))
    assert Gpu.objects.get(pk=gpu.pk).healthy is False


def test_a_gpu_an_operator_took_out_is_not_put_back_by_a_rule(telemetry_cluster: Any) -> None:
    gpu = Gpu.objects.get(uuid="GPU-n1-1")
    set_gpu_health(gpu.pk, healthy=False, reason="fan noise")
    for minute in range(15):
        evaluate_gpu_health(T0 + timedelta(minutes=minute), FixedHealth({}))
    assert Gpu.objects.get(pk=gpu.pk).healthy is False
    assert GpuHealthEvent.objects.count() == 0


def test_a_drain_xid_drains_the_whole_node(telemetry_cluster: Any) -> None:
    policy = HealthPolicy(drain_xids=frozenset({79}))
    evaluate_gpu_health(T0, FixedHealth({"GPU-n1-0": {"xid": 79}}), policy)

    node = Node.objects.get(name="n1")
    assert node.cordoned is True
    assert states("cs-busy", "cs-idle", "train") == {
        "cs-busy": WorkloadState.PENDING,
        "cs-idle": WorkloadState.PENDING,
        "train": WorkloadState.PENDING,
    }
    assert list(OperatorAction.objects.order_by("id").values_list("action", flat=True)) == [
        "gpu_unhealthy",
        "drain",
    ]


def test_the_simulated_cluster_reads_nominal_health_that_follows_utilization(
    telemetry_cluster: Any,
) -> None:
    from scheduling.telemetry.health import NominalHealth
    from scheduling.telemetry.ingestion import ingest_minute
    from scheduling.telemetry.tests.fixtures import FIXED, FixedMetrics

    ingest_minute(T0, FixedMetrics(FIXED))  # train (whole GPU-n1-1) at 90 %
    gpus = list(Gpu.objects.select_related("node").order_by("pk"))
    readings = {g.uuid: r for g in gpus for r in NominalHealth().read(gpus) if r.gpu_id == g.pk}

    train = readings["GPU-n1-1"]
    assert (train.xid, train.temperature_c, train.power_w) == (0, 76.5, 350.0)
    report = evaluate_gpu_health(T0, NominalHealth())
    assert (report.readings, report.changes) == (4, ())
    assert GpuHealth.objects.get(gpu__uuid="GPU-n1-1").temperature_c == 76.5
