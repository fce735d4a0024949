"""Usage API: scoping over the personas, exact series, bad input."""

from __future__ import annotations

import pytest
import time_machine

from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.tests.fixtures import FIXED, T0, FixedMetrics

pytestmark = pytest.mark.django_db


@pytest.fixture
def ingested(telemetry_cluster):  # type: ignore[no-untyped-def]
    with time_machine.travel(T0, tick=False):
        ingest_minute(T0, FixedMetrics(FIXED))
        yield telemetry_cluster


@pytest.mark.parametrize(
    ("_case", "persona", "expected"),
    [
        ("tenant admin", "alice", 200),
        ("member", "bob", 200),
        ("other tenant", "charlie", 404),
        ("operator", "operator", 200),
    ],
)
def test_tenant_and_quota_usage_are_scoped(request, api_as, ingested, _case, persona, expected):
    client = api_as(request.getfixturevalue(persona))
    quota = ingested.quotas["team-a"]
    assert client.get("/api/v1/usage/tenants/team-a/?range=6h").status_code == expected
    assert client.get(f"/api/v1/usage/quotas/{quota.pk}/?range=6h").status_code == expected


def test_tenant_usage_series(api_as, bob, ingested):
    body = api_as(bob).get("/api/v1/usage/tenants/team-a/?range=6h").json()
    assert body["resolution"] == "minute"
    assert (body["allocated_gpu_hours"], body["idle_gpu_hours"], body["utilization_percent"]) == (
        0.017,
        0.004,
        45.5,
    )
    point = body["points"][0]
    assert point["ts"] == "2026-11-02T10:30:00Z"
    assert {k: point[k] for k in ("allocated", "used", "idle", "min", "max", "borrowed")} == {
        "allocated": 1.0,
        "used": 0.455,
        "idle": 0.25,
        "min": 1.0,
        "max": 2.0,
        "borrowed": 0.0,
    }
    assert [w["name"] for w in body["wasting"]] == ["cs-idle"]


def test_quota_and_pool_usage(api_as, charlie, ingested):
    client = api_as(charlie)
    quota = ingested.quotas["team-b"]
    body = client.get(f"/api/v1/usage/quotas/{quota.pk}/?range=6h").json()
    assert (body["quota"], body["points"][0]["allocated"], body["points"][0]["pending"]) == (
        "team-b",
        1.0,
        1.0,
    )
    pool = client.get("/api/v1/usage/pools/a100/?range=6h").json()
    assert pool["points"][0]["allocation_milli_percent"] == 66.67
    assert pool["points"][0]["wait_p95_seconds"] == 282.0
    assert client.get("/api/v1/usage/pools/nope/").status_code == 404


def test_bad_range_is_400_with_the_field(api_as, bob, ingested):
    response = api_as(bob).get("/api/v1/usage/tenants/team-a/?range=2y")
    assert response.status_code == 400
    body = response.json()["error"]
    assert body["code"] == "invalid"
    assert list(body["fields"]) == ["range"]
