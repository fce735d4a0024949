"""The what-if planner: recorded demand replayed on the pool as it is and after a change."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from scheduling.services.whatif import WhatIfChange, run_whatif
from scheduling.tests.factories import make_group, make_quota, small_cluster
from scheduling.tests.test_demand import record

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy_day(team_a: Any) -> Any:
    """One node of one A100; in the last day, a ran 0-100 s; b and c (submitted at 10 s, 20 s) waited."""
    small_cluster(gpu_nodes=1, gpus_per_node=1)
    quota = make_quota(make_group(), team_a)
    t0 = timezone.now() - timedelta(hours=2)
    s = lambda seconds: t0 + timedelta(seconds=seconds)  # noqa: E731
    record(quota, "a", s(0), s(0), s(100))
    record(quota, "b", s(10), s(100), s(150))
    record(quota, "c", s(20), s(150), s(200))
    return quota


def test_one_more_node_of_the_model_lets_everyone_start_on_arrival(busy_day: Any) -> None:
    report = run_whatif(busy_day.group, 1, WhatIfChange(add_model="A100", add_count=2))
    base, changed = report.baseline, report.changed
    assert (report.requests, report.recorded_waits_p95) == (3, 126.0)
    assert (base.nodes, base.gpus, changed.nodes, changed.gpus) == (1, 1, 3, 3)
    assert (base.summary.waits.p50, base.summary.waits.p99) == (90.0, pytest.approx(129.2))
    assert (changed.summary.waits.p50, changed.summary.waits.p99) == (0.0, 0.0)
    assert base.team_waits_p95 == {"team-a": pytest.approx(126.0)}
    assert base.summary.never_started == changed.summary.never_started == 0
    assert len(base.hours) == len(base.allocated_gpus) == len(base.waiting) == 400
    assert max(base.waiting) == 2
    assert max(changed.waiting) == 0


def test_the_api_runs_the_planner_for_operators_and_names_bad_fields(
    busy_day: Any, operator: Any, alice: Any, api_as: Any
) -> None:
    body = {"group": busy_day.group_id, "days": 1, "add_model": "A100", "add_count": 1}
    report = api_as(operator).post("/api/v1/what-if/", body, format="json").json()
    assert (report["baseline"]["gpus"], report["changed"]["gpus"]) == (1, 2)
    assert report["changed"]["waits"]["p50"] == 0.0
    wrong_model = api_as(operator).post(
        "/api/v1/what-if/", {**body, "add_model": "H100"}, format="json"
    )
    assert wrong_model.status_code == 400
    assert wrong_model.json()["error"]["fields"] == {"add_model": ["One of: A100."]}
    too_many = api_as(operator).post(
        "/api/v1/what-if/", {**body, "add_count": 0, "remove_model": "A100", "remove_count": 2},
        format="json",
    )  # fmt: skip
    assert too_many.json()["error"]["fields"] == {"remove_count": ["At most 1."]}
    bad_days = api_as(operator).post("/api/v1/what-if/", {**body, "days": 91}, format="json")
    assert bad_days.status_code == 400
    assert "days" in bad_days.json()["error"]["fields"]
    assert api_as(alice).post("/api/v1/what-if/", body, format="json").status_code == 403


def test_the_page_is_for_operators_only_and_shows_both_runs_side_by_side(
    busy_day: Any, operator: Any, alice: Any
) -> None:
    client = Client()
    client.force_login(alice)
    assert client.get("/cluster/what-if/").status_code == 404  # operators' pages hide themselves
    client.force_login(operator)
    query = f"?group={busy_day.group_id}&days=1&add_model=A100&add_count=1&remove_count=0"
    page = client.get("/cluster/what-if/" + query).content.decode()
    assert '<td data-testid="gpus-0">1 nodes, 1 GPUs</td>' in page
    assert '<td data-testid="gpus-1">2 nodes, 2 GPUs</td>' in page
    assert '<td data-testid="waits-0">1.5 min / 2.1 min / 2.2 min</td>' in page
    # two GPUs: b starts beside a; c waits 40 s for b (ends at 60 s)
    assert '<td data-testid="waits-1">0 s / 36 s / 39 s</td>' in page
    assert 'id="allocation-figure"' in page
    wrong = client.get("/cluster/what-if/" + query.replace("A100", "H100")).content.decode()
    assert '<span class="error" data-testid="error-add_model">One of: A100.</span>' in wrong


def test_the_cluster_page_links_operators_to_the_planner(operator: Any, alice: Any) -> None:
    client = Client()
    client.force_login(operator)
    assert 'href="/cluster/what-if/"' in client.get("/cluster/").content.decode()
    client.force_login(alice)
    assert 'href="/cluster/what-if/"' not in client.get("/cluster/").content.decode()
