"""/metrics: exposition format (pure) and the endpoint (token, staff session, figures)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dashboards.metrics import Family, histogram, render
from scheduling.models import Shard
from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.tests.fixtures import FIXED, T0, FixedMetrics


def test_render_writes_help_and_type_once_and_escapes_labels():
    fam = Family("x_total", "Things\nseen.", "counter")
    fam.add(3, tenant='a"b')
    fam.add(1.5, tenant="c\\d")
    hist = Family("lat_seconds", "Latency.", "histogram")
    histogram(hist, [0.004, 0.02, 3.0], (0.01, 1.0), pool="p")
    assert render([fam, hist]).splitlines() == [
        "# HELP x_total Things\\nseen.",
        "# TYPE x_total counter",
        'x_total{tenant="a\\"b"} 3',
        'x_total{tenant="c\\\\d"} 1.5',
        "# HELP lat_seconds Latency.",
        "# TYPE lat_seconds histogram",
        'lat_seconds_bucket{le="0.01",pool="p"} 1',
        'lat_seconds_bucket{le="1",pool="p"} 2',
        'lat_seconds_bucket{le="+Inf",pool="p"} 3',
        'lat_seconds_sum{pool="p"} 3.024',
        'lat_seconds_count{pool="p"} 3',
    ]


@pytest.mark.django_db
def test_metrics_needs_the_token_or_a_staff_session(client, settings, bob, operator):
    settings.TESSERA_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
    assert ok.status_code == 200
    assert ok["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    client.force_login(bob)
    assert client.get("/metrics").status_code == 401
    client.force_login(operator)
    assert client.get("/metrics").status_code == 200


@pytest.mark.django_db
def test_metrics_reports_allocation_quotas_pending_cycles_and_placements(
    client, settings, telemetry_cluster
):
    settings.TESSERA_METRICS_TOKEN = "s3cret"
    Shard.objects.create(group=telemetry_cluster.group, last_cycle_ms=12.0)
    ingest_minute(T0, FixedMetrics(FIXED))
    Shard.objects.filter(group=telemetry_cluster.group).update(last_cycle_ms=300.0)
    ingest_minute(T0 + timedelta(minutes=1), FixedMetrics(FIXED))
    body = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").content.decode()
    lines = set(body.splitlines())
    expected = {
        "# TYPE tessera_tenant_gpu_allocated_milli gauge",
        'tessera_tenant_gpu_allocated_milli{tenant="team-a"} 1000',
        'tessera_tenant_gpu_allocated_milli{tenant="team-b"} 1000',
        'tessera_quota_gpu_min_milli{pool="a100",quota="team-a",tenant="team-a"} 1000',
        'tessera_quota_gpu_max_milli{pool="a100",quota="team-b",tenant="team-b"} 3000',
        'tessera_quota_gpu_borrowed_milli{pool="a100",quota="team-b",tenant="team-b"} 500',
        'tessera_pending_workloads{pool="a100",tenant="team-b"} 1',
        'tessera_pool_gpu_capacity_milli{pool="a100"} 3000',
        'tessera_pool_gpu_allocated_milli{pool="a100"} 2000',
        "# TYPE tessera_scheduling_cycle_seconds histogram",
        'tessera_scheduling_cycle_seconds_bucket{le="0.01",pool="a100"} 0',
        'tessera_scheduling_cycle_seconds_bucket{le="0.025",pool="a100"} 1',
        'tessera_scheduling_cycle_seconds_bucket{le="0.25",pool="a100"} 1',
        'tessera_scheduling_cycle_seconds_bucket{le="0.5",pool="a100"} 2',
        'tessera_scheduling_cycle_seconds_bucket{le="+Inf",pool="a100"} 2',
        'tessera_scheduling_cycle_seconds_sum{pool="a100"} 0.312',
        'tessera_scheduling_cycle_seconds_count{pool="a100"} 2',
        "# TYPE tessera_placements_total counter",
        'tessera_placements_total{tenant="team-a"} 3',
        'tessera_placements_total{tenant="team-b"} 1',
    }
    assert expected - lines == set()
    assert body.count("# HELP tessera_quota_gpu_runtime_milli ") == 1


@pytest.mark.django_db
def test_metrics_report_gpu_health_the_oldest_wait_and_allocation_per_quota(
    client, settings, telemetry_cluster
):
    # the alerting rules (deploy/helm/tessera/templates/prometheusrule.yaml) read these families
    from dashboards.metrics import health_and_wait_families
    from scheduling.models import Workload

    Workload.objects.filter(name="waiting").update(submitted_at=T0 - timedelta(minutes=45))
    families = {f.name: f for f in health_and_wait_families(T0)}

    assert families["tessera_gpu_healthy"].samples == [
        ("", {"node": "n1", "gpu": "0", "uuid": "GPU-n1-0"}, 1.0),
        ("", {"node": "n1", "gpu": "1", "uuid": "GPU-n1-1"}, 1.0),
        ("", {"node": "n2", "gpu": "0", "uuid": "GPU-n2-0"}, 1.0),
        ("", {"node": "n2", "gpu": "1", "uuid": "GPU-n2-1"}, 0.0),
    ]
    assert families["tessera_pending_oldest_wait_seconds"].samples == [
        ("", {"pool": "a100"}, 2700.0)
    ]
    assert families["tessera_quota_gpu_allocated_milli"].samples == [
        ("", {"pool": "a100", "quota": "team-a", "tenant": "team-a"}, 1000.0),
        ("", {"pool": "a100", "quota": "team-b", "tenant": "team-b"}, 1000.0),
    ]
