"""The demo seeder: demo jobs placed by a real cycle, then history; idempotent."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest

from scheduling.models import Workload
from scheduling.telemetry import demo
from scheduling.telemetry.models import PoolSample, WorkloadHourly

pytestmark = pytest.mark.django_db


def test_demo_seed_submits_jobs_backfills_once(telemetry_cluster):
    out = io.StringIO()
    demo.seed(out)
    names = set(Workload.objects.filter(name__startswith="demo-").values_list("name", flat=True))
    assert names == {"demo-train-a100", "demo-serve-a100", "demo-notebook-a100"}
    assert Workload.objects.filter(name__startswith="demo-").count() == 6
    assert WorkloadHourly.objects.exists()
    assert PoolSample.objects.filter(resolution="hour").count() >= 720
    assert "720 hours of history" in out.getvalue()
    # issue 16: a full day of minutes (the dashboards' 24 h views), every minute present
    minutes = PoolSample.objects.filter(resolution="minute")
    first = minutes.order_by("ts").values_list("ts", flat=True).first()
    last = minutes.order_by("-ts").values_list("ts", flat=True).first()
    assert first is not None
    assert last is not None
    assert last - first >= timedelta(hours=24)
    assert minutes.values("ts").distinct().count() == (last - first) // timedelta(minutes=1) + 1
    again = io.StringIO()
    demo.seed(again)
    assert again.getvalue() == "telemetry: 0 demo jobs submitted; history already present\n"
