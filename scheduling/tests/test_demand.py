"""Recorded demand: the export of a window of workloads, and its replay through the simulator."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from core.simulation import ReplayOptions, replay
from scheduling import services
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from scheduling.services.demand import empty_cluster, recorded_demand, timed_requests
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db


def record(
    quota: Any, name: str, submitted: Any, started: Any = None, finished: Any = None
) -> None:
    w = services.submit_workload(
        tenant=quota.tenant,
        quota=quota,
        kind="job_pod",
        name=name,
        cpu_milli=1000,
        memory_mib=1024,
        gpu_count=1,
        gpu_milli=1000,
    )
    state = WorkloadState.SUCCEEDED if finished else WorkloadState.PENDING
    Workload.objects.filter(pk=w.pk).update(
        submitted_at=submitted, started_at=started, finished_at=finished, state=state
    )


@pytest.fixture
def history(team_a: Any) -> Any:
    """One GPU; a: 0-100 s, b: waited 10-100 s, ran to 150 s; c: submitted at 20 s, never started."""
    small_cluster(gpu_nodes=1, gpus_per_node=1)
    quota = make_quota(make_group(), team_a)
    t0 = timezone.now() - timedelta(hours=1)
    s = lambda seconds: t0 + timedelta(seconds=seconds)  # noqa: E731
    record(quota, "a", s(0), s(0), s(100))
    record(quota, "b", s(10), s(100), s(150))
    record(quota, "c", s(20))
    return quota, t0


def test_a_window_of_recorded_demand_replays_as_it_happened(history: Any) -> None:
    quota, t0 = history
    records = recorded_demand(t0 - timedelta(seconds=1), timezone.now(), quota.group)
    assert [(r.tenant, r.gpu_count, r.gpu_milli) for r in records] == [("team-a", 1, 1000)] * 3
    requests = timed_requests(records, origin=t0, until=t0 + timedelta(seconds=200))
    assert [(t.submit, t.duration, t.real_start) for t in requests] == [
        (0, 100, 0),
        (10, 50, 100),
        (20, 75, None),  # never started: the median run time of its kind (100 and 50 s)
    ]
    result = replay(empty_cluster(quota.group), requests, ReplayOptions(horizon=400))
    assert [o.start for o in result.outcomes] == [0, 100, 150]


def test_the_window_leaves_out_what_was_submitted_before_it(history: Any) -> None:
    quota, t0 = history
    records = recorded_demand(t0 + timedelta(seconds=5), timezone.now(), quota.group)
    assert len(records) == 2


def test_operators_export_json_and_csv_and_bad_windows_are_400(
    history: Any, operator: Any, alice: Any, api_as: Any
) -> None:
    rows = api_as(operator).get("/api/v1/demand/?days=1").json()
    assert [r["tenant"] for r in rows] == ["team-a"] * 3
    assert [r["started_at"] is None for r in rows] == [False, False, True]
    csv_text = api_as(operator).get("/api/v1/demand/?days=1&output=csv").content.decode()
    lines = csv_text.splitlines()
    assert lines[0].startswith("workload_id,kind,tenant,quota_id,group,cpu_milli,memory_mib,")
    assert len(lines) == 4
    bad = api_as(operator).get("/api/v1/demand/?days=0")
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {"days": ["Expected 1-90, got '0'."]}
    assert api_as(operator).get("/api/v1/demand/?days=1&group=999999").status_code == 400
    assert api_as(alice).get("/api/v1/demand/?days=1").status_code == 403


def test_a_formula_in_a_gpu_model_is_neutralised_in_the_operators_csv(
    history: Any, operator: Any, api_as: Any
) -> None:
    Workload.objects.filter(name="a").update(gpu_models=['=HYPERLINK("http://evil","x")'])
    text = api_as(operator).get("/api/v1/demand/?days=1&output=csv").content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["gpu_models"] for r in rows] == ['\'=HYPERLINK("http://evil","x")', "", ""]
