"""Beat tasks of telemetry run at most once per period, whatever beat re-sends (issue item 15:
ingestion ran 4 times in one minute after beat restarts)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine

from scheduling.telemetry.models import WorkloadSample
from scheduling.telemetry.tasks import ingest_telemetry_task, prune_telemetry_task
from scheduling.telemetry.tests.fixtures import T0

pytestmark = pytest.mark.django_db


def test_ingesting_the_same_minute_twice_does_the_work_once(telemetry_cluster):
    # given the minute's ingestion ran once (beat sent it)
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False):
        first = ingest_telemetry_task.apply().get()
    rows = set(WorkloadSample.objects.values_list("pk", "ts"))
    assert first == {"minute": T0.isoformat(), "workloads": 4, "failed_groups": []}
    assert len(rows) == 4
    # when a restarted beat sends it again within the same minute
    with time_machine.travel(T0 + timedelta(seconds=40), tick=False):
        again = ingest_telemetry_task.apply().get()
    # then the second run skips: the minute's rows are the first run's, not rewritten
    assert again == {"minute": T0.isoformat(), "skipped": "already ran for this minute"}
    assert set(WorkloadSample.objects.values_list("pk", "ts")) == rows
    # and the next minute is ingested as usual
    with time_machine.travel(T0 + timedelta(seconds=65), tick=False):
        following = ingest_telemetry_task.apply().get()
    assert following == {
        "minute": (T0 + timedelta(minutes=1)).isoformat(),
        "workloads": 4,
        "failed_groups": [],
    }
    assert WorkloadSample.objects.filter(ts=T0 + timedelta(minutes=1)).count() == 4


def test_pruning_twice_in_the_same_hour_prunes_once(telemetry_cluster):
    with time_machine.travel(T0 + timedelta(minutes=17), tick=False):
        first = prune_telemetry_task.apply().get()
        again = prune_telemetry_task.apply().get()
    assert first == {"minute_rows": 0, "hour_rows": 0, "failed_rows": 0, "failed_ids": []}
    assert again == {"skipped": "already ran for this hour"}
