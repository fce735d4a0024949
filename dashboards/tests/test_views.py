"""Dashboard pages and their JSON endpoints: access, scoping, figures fed with the fixed data, errors."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.models import QuotaSample, Resolution
from scheduling.telemetry.tests.fixtures import FIXED, T0, FixedMetrics

pytestmark = pytest.mark.django_db

PAGES = [
    "/dashboards/",
    "/dashboards/tenants/",
    "/dashboards/fragmentation/",
    "/dashboards/savings/",
    "/dashboards/chargeback/",
]
DATA = [
    "/dashboards/data/",
    "/dashboards/tenants/data/",
    "/dashboards/fragmentation/data/",
    "/dashboards/savings/data/",
    "/dashboards/chargeback/data/",
]


@pytest.fixture
def ingested(telemetry_cluster):  # type: ignore[no-untyped-def]
    with time_machine.travel(T0, tick=False):
        ingest_minute(T0, FixedMetrics(FIXED))
        yield telemetry_cluster


@pytest.mark.parametrize("url", PAGES + DATA + ["/dashboards/chargeback.csv"])
def test_anonymous_users_go_to_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("url", PAGES)
def test_every_page_renders_controls_definitions_and_plot_containers(client, bob, ingested, url):
    client.force_login(bob)
    response = client.get(url)
    body = response.content.decode()
    assert response.status_code == 200
    assert "vendor/plotly/plotly.min.js" in body
    assert "dashboards/js/dashboards.js" in body
    assert "data-figure=" in body
    assert "GPU allocation = allocated GPU capacity" in body
    assert "Fragmentation = free GPU capacity that the current request mix cannot use" in body


def test_overview_data_has_the_pool_figures(client, bob, ingested):
    client.force_login(bob)
    body = client.get("/dashboards/data/?range=6h").json()
    assert body["summary"] == {
        "allocation_milli": 66.67,
        "allocation_cards": 100.0,
        "utilization": 45.17,
        "pending": 1.0,
        "wait_p50": 2.0,
        "wait_p95": 4.7,
    }
    allocation = body["figures"]["allocation"]["data"]
    assert [(t["name"], t["y"]) for t in allocation] == [
        ("a100 allocation (compute)", [66.67]),
        ("a100 allocation (cards)", [100.0]),
        ("a100 SM utilization", [45.17]),
    ]
    assert body["figures"]["pending"]["data"][0]["y"] == [1.0]
    assert body["figures"]["waits"]["data"][0]["y"] == [2.0]


def test_bad_range_is_a_400_with_the_field(client, bob, ingested):
    client.force_login(bob)
    response = client.get("/dashboards/data/?range=10y")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert response.json()["error"]["fields"] == {
        "range": ["choose one of 6h, 24h, 48h, 7d, 30d, 90d"]
    }
    page = client.get("/dashboards/?range=10y")
    assert page.status_code == 200
    assert "field-error" in page.content.decode()


def test_members_see_their_own_tenant_and_404_for_others(client, bob, charlie, ingested):
    client.force_login(bob)
    own = client.get("/dashboards/tenants/data/?range=6h").json()
    assert own["summary"] == {
        "allocated_gpu_hours": 0.017,
        "used_gpu_hours": 0.008,
        "idle_gpu_hours": 0.004,
        "utilization": 45.5,
    }
    assert [t["name"] for t in own["figures"]["quota"]["data"]] == [
        "allocated",
        "borrowed",
        "min",
        "max",
        "runtime share",
    ]
    assert own["figures"]["quota"]["data"][0]["y"] == [1.0]
    assert own["tables"]["wasting"]["rows"] == [
        ["cs-idle", 0.004, 0.004, 2.0],
        ["Everything else (2 workloads)", 0.0, 0.013, 60.0],
    ]
    assert client.get("/dashboards/tenants/?tenant=team-b").status_code == 404
    assert client.get("/dashboards/tenants/data/?tenant=team-b").status_code == 404
    page = client.get("/dashboards/tenants/").content.decode()
    assert 'value="team-b"' not in page


def test_operators_see_any_tenant(client, operator, ingested):
    client.force_login(operator)
    other = client.get("/dashboards/tenants/data/?tenant=team-b&range=6h").json()
    assert other["figures"]["quota"]["data"][0]["y"] == [1.0]
    assert other["summary"]["utilization"] == 90.0
    page = client.get("/dashboards/tenants/").content.decode()
    assert 'value="team-a"' in page
    assert 'value="team-b"' in page


def test_fragmentation_data(client, bob, ingested):
    client.force_login(bob)
    body = client.get("/dashboards/fragmentation/data/?pool=a100&preset=quarter").json()
    assert body["summary"] == {
        "preset": "25% / 20 GiB",
        "fits_total": 4,
        "free_gpus": 1.0,
        "fragmented_gpus": 0.4,
        "fragmentation": 40.0,
    }
    # free compute in % of each GPU (a person reads percent, not milli)
    assert body["figures"]["compute"]["data"][0]["z"] == [[50.0, 0.0], [50.0, None]]
    # free memory in % of each card's memory, the GiB in the tooltip
    assert body["figures"]["memory"]["data"][0]["z"] == [[50.0, 0.0], [50.0, None]]
    assert body["figures"]["memory"]["data"][0]["customdata"] == [
        ["40 of 80 GiB", "0 of 80 GiB"],
        ["40 of 80 GiB", None],
    ]
    assert body["figures"]["fits"]["data"][0]["y"] == [2, 2]
    custom = client.get(
        "/dashboards/fragmentation/data/?pool=a100&gpu_percent=25&gpu_memory_gib=20"
    )
    assert custom.json()["summary"]["preset"] == "25% / 20 GiB"
    bad = client.get("/dashboards/fragmentation/data/?gpu_percent=0")
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {"gpu_percent": ["Enter between 0.1 and 100 %."]}
    abc = client.get("/dashboards/fragmentation/data/?gpu_memory_gib=abc")
    assert abc.status_code == 400
    assert abc.json()["error"]["fields"] == {
        "gpu_memory_gib": ["Enter a number of GiB, e.g. 2 or 0.5."]
    }
    assert client.get("/dashboards/fragmentation/data/?pool=nope").status_code == 404


def test_savings_data(client, bob, ingested):
    client.force_login(bob)
    body = client.get("/dashboards/savings/data/?range=6h").json()
    assert body["summary"] == {"unsliced": 2.0, "occupied": 1.0, "saved": 1.0}
    assert [t["y"] for t in body["figures"]["savings"]["data"]] == [[2.0], [1.0]]


@pytest.fixture
def charges(telemetry_cluster, settings):  # type: ignore[no-untyped-def]
    settings.TESSERA_GPU_HOUR_PRICES = "A100=2.5,default=1.0"
    for slug, hours in (("team-a", 10), ("team-b", 4)):
        quota = telemetry_cluster.quotas[slug]
        QuotaSample.objects.create(
            resolution=Resolution.HOUR,
            ts=datetime(2026, 11, 1, 3, 0, tzinfo=UTC),
            minutes=60,
            group=quota.group,
            quota=quota,
            tenant=quota.tenant,
            gpu_model="A100",
            allocated_milli=hours * 60000,
            used_milli=hours * 30000,
        )
    with time_machine.travel(T0, tick=False):
        yield


def test_chargeback_operators_see_all_members_their_own_and_csv(client, bob, operator, charges):
    client.force_login(operator)
    body = client.get("/dashboards/chargeback/data/?months=1").json()
    assert body["tables"]["chargeback"]["rows"] == [
        ["2026-11", "team-a", "A100", 10.0, 5.0, "2.5", "25.00"],
        ["2026-11", "team-b", "A100", 4.0, 2.0, "2.5", "10.00"],
    ]
    assert body["summary"] == {
        "total_cost": "35.00 USD",
        "allocated_gpu_hours": 14.0,
        "used_gpu_hours": 7.0,
    }
    client.force_login(bob)
    own = client.get("/dashboards/chargeback/data/").json()
    assert [r[1] for r in own["tables"]["chargeback"]["rows"]] == ["team-a"]
    response = client.get("/dashboards/chargeback.csv?months=3")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert list(csv.reader(io.StringIO(response.content.decode()))) == [
        [
            "month",
            "tenant",
            "gpu_model",
            "allocated_gpu_hours",
            "used_gpu_hours",
            "price_per_gpu_hour",
            "charge",
            "currency",
        ],
        ["2026-11", "team-a", "A100", "10.000", "5.000", "2.5", "25.00", "USD"],
    ]
    assert client.get("/dashboards/chargeback/data/?months=99").status_code == 400


CSV_HEADER = [
    "month",
    "tenant",
    "gpu_model",
    "allocated_gpu_hours",
    "used_gpu_hours",
    "price_per_gpu_hour",
    "charge",
    "currency",
]


def test_chargeback_tenant_narrows_the_table_and_the_csv(client, bob, operator, charges):
    # issue 14: ?tenant= was ignored, so the CSV of one team held every team's charges
    client.force_login(operator)
    body = client.get("/dashboards/chargeback/data/?months=1&tenant=team-b").json()
    assert body["tables"]["chargeback"]["rows"] == [
        ["2026-11", "team-b", "A100", 4.0, 2.0, "2.5", "10.00"],
    ]
    assert body["summary"]["total_cost"] == "10.00 USD"
    response = client.get("/dashboards/chargeback.csv?months=1&tenant=team-b")
    assert list(csv.reader(io.StringIO(response.content.decode()))) == [
        CSV_HEADER,
        ["2026-11", "team-b", "A100", "4.000", "2.000", "2.5", "10.00", "USD"],
    ]
    # a member names only their own teams; another team's slug is not found
    client.force_login(bob)
    assert client.get("/dashboards/chargeback.csv?tenant=team-b").status_code == 404
    assert client.get("/dashboards/chargeback/data/?tenant=team-b").status_code == 404
    own = client.get("/dashboards/chargeback.csv?months=1&tenant=team-a")
    assert list(csv.reader(io.StringIO(own.content.decode())))[1:] == [
        ["2026-11", "team-a", "A100", "10.000", "5.000", "2.5", "25.00", "USD"],
    ]


def test_payloads_are_shared_until_the_next_ingestion(
    client, bob, ingested, django_assert_max_num_queries
):
    client.force_login(bob)
    first = client.get("/dashboards/data/?range=6h").json()
    # a second viewer in the same minute: session, user, active tenant and the version check only
    with django_assert_max_num_queries(5):
        again = client.get("/dashboards/data/?range=6h").json()
    assert again == first
    ingest_minute(T0 + timedelta(minutes=1), FixedMetrics({**FIXED, "train": 10.0}))
    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        moved = client.get("/dashboards/data/?range=6h").json()
    assert moved["figures"]["allocation"]["data"][2]["y"] == [45.17, 18.5]


def test_fragmentation_map_follows_the_shard_version(client, bob, ingested):
    from scheduling.models import PlacementGpu, Shard

    shard = Shard.objects.create(group=ingested.group, version=1)
    client.force_login(bob)
    url = "/dashboards/fragmentation/data/?preset=quarter"
    assert client.get(url).json()["summary"]["fits_total"] == 4
    PlacementGpu.objects.filter(placement__workload__name="half").update(
        gpu_milli=1000, gpu_memory_mib=81920
    )
    assert client.get(url).json()["summary"]["fits_total"] == 4  # same version: the shared payload
    Shard.objects.filter(pk=shard.pk).update(version=2)
    assert client.get(url).json()["summary"]["fits_total"] == 2


def test_tenant_idle_total_and_wasting_rows_come_from_the_same_samples(client, bob, ingested):
    # issue 16: the per-tenant page showed 1.42 idle GPU-h above rows adding up to 9.25. At 24 h the
    # totals read minute rows while the table read the hour rollups, which also held hours without
    # minute rows (the demo's backfilled history): the rows must come from the samples the total does.
    from scheduling.models import Workload
    from scheduling.telemetry.models import WorkloadHourly

    idle = Workload.objects.get(name="cs-idle")
    WorkloadHourly.objects.create(
        hour=(T0 - timedelta(hours=12)).replace(minute=0, second=0, microsecond=0),
        workload=idle,
        tenant=idle.tenant,
        quota=idle.quota,
        kind="codespace",
        minutes=60,
        allocated_milli_minutes=9 * 60000,
        used_milli_minutes=0,
        idle_milli_minutes=9 * 60000,
    )
    client.force_login(bob)
    body = client.get("/dashboards/tenants/data/?range=24h").json()
    rows = body["tables"]["wasting"]["rows"]
    # cs-idle, then the job "half" (50 % SM) and cs-busy (80 %): allocated, not idle, 60 % used
    assert rows == [
        ["cs-idle", 0.004, 0.004, 2.0],
        ["Everything else (2 workloads)", 0.0, 0.013, 60.0],
    ]
    assert sum(r[1] for r in rows) == body["summary"]["idle_gpu_hours"]


def _bill(quota, model: str, hours: int) -> None:
    QuotaSample.objects.create(
        resolution=Resolution.HOUR,
        ts=datetime(2026, 11, 1, 3, 0, tzinfo=UTC),
        minutes=60,
        group=quota.group,
        quota=quota,
        tenant=quota.tenant,
        gpu_model=model,
        allocated_milli=hours * 60000,
        used_milli=0,
    )


def test_every_demo_gpu_model_has_its_own_price_matched_exactly(
    client, operator, telemetry_cluster
):
    # issue 16: an L40S was billed at the default because only "L4" was priced
    from django.conf import settings as live

    from portal.settings import TESSERA_GPU_HOUR_PRICES as DEFAULT_PRICES
    from scheduling.telemetry.series import gpu_hour_prices

    assert live.TESSERA_GPU_HOUR_PRICES == DEFAULT_PRICES
    prices = gpu_hour_prices()
    for model in ("H100", "A100", "L40S", "T4"):  # the demo cluster's models
        assert model.lower() in prices
    quota = telemetry_cluster.quotas["team-a"]
    for model in ("L40S", "L4", "L40"):
        _bill(quota, model, 10)
    client.force_login(operator)
    with time_machine.travel(T0, tick=False):
        body = client.get("/dashboards/chargeback/data/?months=1").json()
    billed = {r[2]: r[5] for r in body["tables"]["chargeback"]["rows"]}
    assert billed == {
        "L40S": str(prices["l40s"]),
        "L4": str(prices["l4"]),
        "L40": str(prices["default"]),  # no "L40" price: the default, never L4's or L40S's
    }
    assert prices["l40s"] != prices["default"]


def test_chargeback_names_its_currency(client, operator, charges, settings):
    settings.TESSERA_CHARGEBACK_CURRENCY = "EUR"
    client.force_login(operator)
    body = client.get("/dashboards/chargeback/data/?months=1").json()
    assert body["summary"]["total_cost"] == "35.00 EUR"
    assert body["tables"]["chargeback"]["columns"][-2:] == ["Price / GPU-h (EUR)", "Charge (EUR)"]
    page = client.get("/dashboards/chargeback/").content.decode()
    assert "Prices per GPU-hour (EUR)" in page
    rows = list(
        csv.reader(io.StringIO(client.get("/dashboards/chargeback.csv?months=1").content.decode()))
    )
    assert rows[0][-1] == "currency"
    assert rows[1][-1] == "EUR"


@pytest.mark.parametrize("range_key", ["24h", "7d"])
def test_tenant_rows_add_up_to_the_totals_at_both_resolutions(
    client: Any, bob: Any, telemetry_cluster: Any, range_key: str
) -> None:
    # issue 16: totals and table from the same samples at the same resolution. 12 minutes of team-a:
    # cs-busy and cs-idle (25 % each) and the job "half" (50 %) all idle (< 5 % SM), so
    # 12 min × 250 milli = 0.05 GPU-h for each codespace, 12 × 500 = 0.1 for the job.
    metrics = FixedMetrics({"cs-busy": 3.0, "cs-idle": 2.0, "half": 1.0, "train": 90.0})
    for minute in range(12):
        ingest_minute(T0 + timedelta(minutes=minute), metrics)
    client.force_login(bob)
    with time_machine.travel(T0 + timedelta(minutes=11), tick=False):
        body = client.get(f"/dashboards/tenants/data/?range={range_key}").json()
    assert body["resolution"] == ("minute" if range_key == "24h" else "hour")
    assert body["tables"]["wasting"]["rows"] == [
        ["cs-busy", 0.05, 0.05, 3.0],
        ["cs-idle", 0.05, 0.05, 2.0],
        ["Everything else (1 workload)", 0.1, 0.1, 1.0],
    ]
    assert body["summary"]["idle_gpu_hours"] == 0.2
    assert body["summary"]["allocated_gpu_hours"] == 0.2


def test_a_formula_in_a_gpu_model_is_neutralised_in_the_chargeback_csv(client, operator, charges):  # type: ignore[no-untyped-def]
    QuotaSample.objects.update(gpu_model="@SUM(1+1)")
    client.force_login(operator)
    rows = list(
        csv.reader(io.StringIO(client.get("/dashboards/chargeback.csv?months=1").content.decode()))
    )
    assert {r[2] for r in rows[1:]} == {"'@SUM(1+1)"}


def test_a_free_card_is_coloured_free_on_the_memory_map_whatever_its_size(client, bob, team_a):  # type: ignore[no-untyped-def]
    # issue 38: a free T4 (16 GiB) was coloured as partly used, on a scale up to the A100's 80 GiB
    from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node

    group = QuotaGroupFactory(name="mixed", node_selector={"pool": "mixed"})
    QuotaFactory(group=group, tenant=team_a)
    make_node("a100-x", pool="mixed", gpu_count=1, gpu_memory_mib=80 * 1024, gpu_model="A100")
    make_node("t4-x", pool="mixed", gpu_count=1, gpu_memory_mib=16 * 1024, gpu_model="T4")
    client.force_login(bob)
    memory = client.get("/dashboards/fragmentation/data/?pool=mixed").json()["figures"]["memory"]
    trace = memory["data"][0]
    assert trace["z"] == [[100.0], [100.0]]
    assert (trace["zmin"], trace["zmax"]) == (0, 100)
    assert trace["customdata"] == [["80 of 80 GiB"], ["16 of 16 GiB"]]
