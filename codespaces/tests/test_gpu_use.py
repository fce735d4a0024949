"""Issue 22: a codespace's page shows its own GPU use on a shared card, labelled apportioned when no
per-container metric split the device's figure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client

from codespaces.tests.test_services import create

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def test_the_codespace_page_labels_its_apportioned_gpu_use(
    alice: Any, bob: Any, team_a: Any, quota_a: Any, template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    # two 25 % codespaces packed on one H100; DCGM says the card is 30 % busy, no HAMi metric
    from scheduling.models import PlacementGpu
    from scheduling.telemetry.ingestion import ingest_minute
    from scheduling.telemetry.prometheus import PrometheusMetrics

    capture = django_capture_on_commit_callbacks
    with time_machine.travel(NOW - timedelta(minutes=10), tick=False):
        dev = create(bob, team_a, "bob-dev", capture)
        create(alice, team_a, "alice-nb", capture)
    shares = PlacementGpu.objects.filter(placement__released_at__isnull=True)
    (uuid,) = {s.gpu.uuid for s in shares.select_related("gpu")}

    class Stub:
        def query(self, promql: str, at: Any = None) -> list[tuple[dict[str, str], float]]:
            return [({"UUID": uuid}, 30.0)] if promql == "DCGM_FI_DEV_GPU_UTIL" else []

    source = PrometheusMetrics("http://unused", client=Stub())  # type: ignore[arg-type]
    ingest_minute(NOW - timedelta(minutes=5), source)
    client = Client()
    client.force_login(bob)
    with time_machine.travel(NOW, tick=False):
        html = client.get(f"/codespaces/{dev.pk}/").content.decode()
    # 300 milli split 250:250 → 150 milli each = 60 % of each slice, labelled as an estimate
    assert "15 % of a GPU used of 25 % held (60.0 % of its allocation" in html
    assert "apportioned: the device&#x27;s use split by allocation" in html
