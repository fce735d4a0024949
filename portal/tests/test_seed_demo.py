"""`manage.py seed_demo` (what `make run` calls on every start) is idempotent as a whole."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command

from scheduling.models import Workload
from scheduling.telemetry.models import QuotaSample, Resolution, WorkloadHourly

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_settings(settings: Any) -> Any:
    settings.TESSERA_BACKEND = "simulated"
    settings.TESSERA_SIM_INVENTORY = "demo"
    return settings


def test_running_seed_demo_again_adds_no_demo_jobs_and_no_history(demo_settings: Any) -> None:
    call_command("seed_demo", stdout=io.StringIO())
    workloads = Workload.objects.count()
    hours = WorkloadHourly.objects.count()
    minutes = QuotaSample.objects.filter(resolution=Resolution.MINUTE).count()
    assert workloads > 0
    assert hours > 0

    call_command("seed_demo", stdout=io.StringIO())

    assert Workload.objects.count() == workloads
    assert WorkloadHourly.objects.count() == hours
    assert QuotaSample.objects.filter(resolution=Resolution.MINUTE).count() == minutes
