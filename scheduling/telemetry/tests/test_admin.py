"""Telemetry admin: changelists and change pages load; rows cannot be added or edited."""

from __future__ import annotations

import pytest

from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.models import (
    GpuSample,
    PoolSample,
    QuotaSample,
    WorkloadHourly,
    WorkloadSample,
)
from scheduling.telemetry.tests.fixtures import FIXED, T0, FixedMetrics

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "model", [WorkloadSample, WorkloadHourly, GpuSample, QuotaSample, PoolSample]
)
def test_admin_lists_and_shows_rows_read_only(client, operator, telemetry_cluster, model):
    ingest_minute(T0, FixedMetrics(FIXED))
    client.force_login(operator)
    base = f"/admin/telemetry/{model._meta.model_name}/"
    assert client.get(base).status_code == 200
    row = model.objects.first()
    assert client.get(f"{base}{row.pk}/change/").status_code == 200
    assert client.get(f"{base}add/").status_code == 403
