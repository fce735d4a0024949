"""The set-based telemetry loops survive one bad row (docs/adr/0004, issue 38): a row the database
refuses inside a statement over many is left out, logged with its id and counted; the others are
written (hourly rollup) or deleted (pruning)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from portal.periodic import ItemFailures
from portal.tests.refused_rows import refused_rows
from scheduling.telemetry import tasks
from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.models import QuotaSample, Resolution, WorkloadHourly, WorkloadSample
from scheduling.telemetry.rollups import prune, rollup_hour
from scheduling.telemetry.tests.fixtures import FIXED, T0, FixedMetrics

pytestmark = pytest.mark.django_db


def errors(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_rollup_writes_every_hour_row_but_the_one_the_database_refuses(
    telemetry_cluster: Any, caplog: Any
) -> None:
    # given two minutes of the four workloads' samples
    ingest_minute(T0, FixedMetrics(FIXED), rollup=False)
    ingest_minute(T0 + timedelta(minutes=1), FixedMetrics(FIXED), rollup=False)
    bad = telemetry_cluster.workloads["half"].pk
    hour = T0.replace(minute=0)
    failures = ItemFailures()
    # when the database refuses the hour row of one workload
    with refused_rows("telemetry_workloadhourly", "INSERT", f"NEW.workload_id = {bad}"):
        with caplog.at_level(logging.WARNING, logger="tessera.periodic"):
            written = rollup_hour(hour, failures=failures)
    # then the three other workloads, the quotas and the pool have their hour rows
    assert written == 3 + 4 + 1
    hourly = set(WorkloadHourly.objects.values_list("workload__name", flat=True))
    assert hourly == {"cs-busy", "cs-idle", "train"}
    assert QuotaSample.objects.filter(resolution=Resolution.HOUR, ts=hour).count() == 4
    assert (failures.failed, failures.failed_ids) == (1, [bad])
    assert errors(caplog) == [f"rollup {hour.isoformat()}: workload hour row {bad} failed"]


def test_prune_deletes_every_old_row_but_the_one_the_database_refuses(
    telemetry_cluster: Any, caplog: Any
) -> None:
    # given a minute of samples, 49 hours old
    ingest_minute(T0, FixedMetrics(FIXED))
    kept = WorkloadSample.objects.order_by("pk").values_list("pk", flat=True)[1]
    # when the database refuses to delete one workload sample
    with refused_rows("telemetry_workloadsample", "DELETE", f"OLD.id = {kept}"):
        with caplog.at_level(logging.WARNING, logger="tessera.periodic"):
            report = prune(T0 + timedelta(hours=49))
    # then every other minute row is gone, and the refused one is counted and logged
    assert report.minute_rows == 3 + 4 + 4 + 1
    assert list(WorkloadSample.objects.values_list("pk", flat=True)) == [kept]
    assert (report.failures.failed, report.failures.failed_ids) == (1, [kept])
    assert errors(caplog) == [f"telemetry prune: telemetry_workloadsample {kept} failed"]


def test_the_prune_task_reports_the_rows_it_could_not_delete(
    telemetry_cluster: Any, time_machine: Any
) -> None:
    ingest_minute(T0, FixedMetrics(FIXED))
    kept = WorkloadSample.objects.order_by("pk").values_list("pk", flat=True)[0]
    time_machine.move_to(T0 + timedelta(hours=49))
    with refused_rows("telemetry_workloadsample", "DELETE", f"OLD.id = {kept}"):
        result = tasks.prune_telemetry_task()
    assert (result["minute_rows"], result["failed_rows"], result["failed_ids"]) == (12, 1, [kept])
