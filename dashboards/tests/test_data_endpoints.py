"""The dashboards' JSON endpoints share one shape (`dashboards.views.data_endpoint`): a bad input is a
400 JSON body naming the field on every one of them, and a payload is computed once per inputs and
data version, whichever endpoint serves it."""

from __future__ import annotations

from typing import Any

import pytest
import time_machine

from dashboards import views
from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.tests.fixtures import FIXED, T0, FixedMetrics

pytestmark = pytest.mark.django_db

RANGE_ERROR = {"range": ["choose one of 6h, 24h, 48h, 7d, 30d, 90d"]}


@pytest.fixture
def ingested(telemetry_cluster: Any) -> Any:
    with time_machine.travel(T0, tick=False):
        ingest_minute(T0, FixedMetrics(FIXED))
        yield telemetry_cluster


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/dashboards/data/?range=10y", "range"),
        ("/dashboards/tenants/data/?range=10y", "range"),
        ("/dashboards/savings/data/?range=10y", "range"),
        ("/dashboards/fragmentation/data/?gpu_percent=abc", "gpu_percent"),
        ("/dashboards/fragmentation/data/?gpu_memory_gib=4096", "gpu_memory_gib"),
    ],
)
def test_every_data_endpoint_answers_bad_input_with_a_400_naming_the_field(
    client: Any, bob: Any, ingested: Any, url: str, field: str
) -> None:
    client.force_login(bob)
    response = client.get(url)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert list(error["fields"]) == [field]
    if field == "range":
        assert error["fields"] == RANGE_ERROR


@pytest.mark.parametrize(
    ("url", "builder", "computed"),
    [
        ("/dashboards/data/?range=6h", "_overview", 1),
        ("/dashboards/tenants/data/?range=6h", "_tenant", 1),
        ("/dashboards/savings/data/?range=6h", "_savings", 1),
        # a pool without a shard has no version that tells when its map changes: never cached
        ("/dashboards/fragmentation/data/", "_fragmentation", 2),
    ],
)
def test_each_payload_is_computed_once_for_every_viewer_until_the_data_changes(
    client: Any,
    bob: Any,
    ingested: Any,
    monkeypatch: Any,
    url: str,
    builder: str,
    computed: int,
) -> None:
    calls: list[tuple[Any, ...]] = []
    real = getattr(views, builder)

    def counted(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(views, builder, counted)
    client.force_login(bob)
    with time_machine.travel(T0, tick=False):
        first = client.get(url)
        second = client.get(url)
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json() == second.json()
    assert len(calls) == computed
