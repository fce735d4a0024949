"""The what-if planner: recorded demand replayed on the pool as it is and after a change."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from core.placement import PlacementRequest
from core.simulation import TimedRequest
from quotas.sharing import Sharing
from scheduling.services.trace_upload import parse_trace
from scheduling.services.whatif import WhatIfChange, requests_under, run_whatif
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
    assert '<td data-testid="gpus-0">1 node, 1 GPU</td>' in page
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


def test_the_demand_under_another_sharing_mode_takes_what_that_mode_hands_out() -> None:
    # given a slice, a whole GPU, two whole GPUs and a CPU-only request
    def req(rid: str, gpus: int, milli: int, memory: int = 0) -> TimedRequest:
        return TimedRequest(PlacementRequest(rid, 1000, 1024, gpus, milli, memory), 0, 10)

    demand = [
        req("slice", 1, 300, 8192),
        req("one", 1, 1000),
        req("two", 2, 1000),
        req("cpu", 0, 0),
    ]

    def shapes(sharing: Sharing) -> tuple[dict[str, tuple[int, int, int]], int]:
        out, refused = requests_under(sharing, demand)
        return {
            t.request_id: (t.request.gpu_count, t.request.gpu_milli, t.request.gpu_memory_mib)
            for t in out
        }, refused

    # exclusive: the slice takes a whole card
    assert shapes(Sharing("exclusive")) == (
        {"slice": (1, 1000, 0), "one": (1, 1000, 0), "two": (2, 1000, 0), "cpu": (0, 0, 0)},
        0,
    )
    # timeslice x4: one replica (250, no memory reserved) per one-GPU request; two GPUs are refused
    assert shapes(Sharing("timeslice", (), 4)) == (
        {"slice": (1, 250, 0), "one": (1, 250, 0), "cpu": (0, 0, 0)},
        1,
    )
    # mig: the smallest profile holding compute and memory (3g.40gb = 428 for the 300 + 8 GiB slice,
    # 7g.80gb for the whole card); two GPUs are refused
    assert shapes(Sharing("mig", ("1g.10gb", "3g.40gb", "7g.80gb"))) == (
        {"slice": (1, 428, 40960), "one": (1, 1000, 81920), "cpu": (0, 0, 0)},
        1,
    )
    assert shapes(Sharing("mig", ("1g.10gb",)))[1] == 3  # nothing but 1g: only the CPU request fits
    assert shapes(Sharing("slice")) == ({t.request_id: (t.request.gpu_count, t.request.gpu_milli, t.request.gpu_memory_mib) for t in demand}, 0)  # fmt: skip


def test_time_slicing_the_pool_lets_every_one_gpu_request_start_on_arrival(busy_day: Any) -> None:
    report = run_whatif(
        busy_day.group, 1, WhatIfChange(sharing_mode="timeslice", timeslice_replicas=4)
    )
    base, changed = report.baseline, report.changed
    assert (base.sharing, changed.sharing, changed.refused) == ("slice", "timeslice", 0)
    assert (base.summary.waits.p50, changed.summary.waits.p50, changed.summary.waits.p99) == (
        90.0,
        0.0,
        0.0,
    )
    assert (base.gpus, changed.gpus) == (1, 1)


def test_the_api_changes_sharing_mode_and_team_caps_and_names_bad_sharing_fields(
    busy_day: Any, operator: Any, api_as: Any
) -> None:
    body = {
        "group": busy_day.group_id,
        "days": 1,
        "sharing_mode": "timeslice",
        "timeslice_replicas": 2,
    }
    report = api_as(operator).post("/api/v1/what-if/", body, format="json").json()
    assert (report["demand"], report["changed"]["sharing"], report["changed"]["refused"]) == (
        "recorded",
        "timeslice",
        0,
    )
    # two replicas: a and b start on arrival, c (at 20 s) waits for b (50 s from 10 s): 40 s
    assert report["changed"]["waits"]["p99"] == pytest.approx(39.2)
    capped = {**body, "team_gpus": {"team-a": 0}}
    report = api_as(operator).post("/api/v1/what-if/", capped, format="json").json()
    assert report["changed"]["team_never_started"] == {"team-a": 3}
    no_profiles = api_as(operator).post(
        "/api/v1/what-if/", {**body, "sharing_mode": "mig", "timeslice_replicas": 1}, format="json"
    )
    assert no_profiles.status_code == 400
    assert list(no_profiles.json()["error"]["fields"]) == ["mig_profiles"]
    too_many = api_as(operator).post(
        "/api/v1/what-if/", {**body, "timeslice_replicas": 17}, format="json"
    )
    assert too_many.status_code == 400
    assert list(too_many.json()["error"]["fields"]) == ["timeslice_replicas"]


TRACE = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    "p0,1000,1024,1,1000,,LS,Running,1000,1100,1000\n"
    "p1,1000,1024,1,1000,,LS,Running,1010,1150,1100\n"
    "p2,1000,1024,1,500,A100,LS,Running,1020,1050,1020\n"
)


def test_an_uploaded_openb_trace_replaces_the_recorded_demand(
    busy_day: Any, operator: Any, api_as: Any
) -> None:
    trace = parse_trace(TRACE.encode())
    # submit = creation - the first creation; duration = deletion - scheduled; real start kept
    assert [(t.request_id, t.submit, t.duration, t.real_start) for t in trace.requests] == [
        ("p0", 0, 100, 0), ("p1", 10, 50, 100), ("p2", 20, 30, 20),
    ]  # fmt: skip
    assert trace.end == 150  # the last deletion: p1's
    upload = SimpleUploadedFile("trace.csv", TRACE.encode(), content_type="text/csv")
    body = {"group": busy_day.group_id, "add_model": "A100", "add_count": 1, "trace": upload}
    report = api_as(operator).post("/api/v1/what-if/", body, format="multipart").json()
    assert (report["demand"], report["days"], report["requests"]) == ("uploaded", 1, 3)
    # one GPU: p1 waits for p0 (90 s), then p2's half GPU for p1 (130 s); with two GPUs p1 starts
    # at once and p2 waits for it (40 s)
    assert report["baseline"]["waits"] == {"count": 3, "p50": 90.0, "p95": 126.0, "p99": 129.2}
    assert report["changed"]["waits"] == {"count": 3, "p50": 0.0, "p95": 36.0, "p99": 39.2}


@pytest.mark.parametrize(
    ("_case", "text", "message"),
    [
        ("missing column", "name,cpu_milli\np0,1\n", "Missing columns: memory_mib, num_gpu, gpu_milli, creation_time, deletion_time (the openb pod-list header)."),
        ("not a number", TRACE.replace("p1,1000,", "p1,lots,"), "Row 3, cpu_milli: 'lots' is not a whole number."),
        ("too many GPUs", TRACE.replace("p2,1000,1024,1,", "p2,1000,1024,99,"), "Row 4, num_gpu: must be between 0 and 64."),
        ("deleted first", TRACE.replace("1000,1100,1000", "1000,900,"), "Row 2, deletion_time: before creation_time."),
        ("same name", TRACE.replace("p1,", "p0,"), "Row 3, name: 'p0' appears twice."),
        ("empty", TRACE.splitlines()[0] + "\n", "No rows: the trace needs at least one pod."),
        ("binary", "\xff\xfe", "Not UTF-8 text."),
    ],
)  # fmt: skip
def test_a_bad_trace_is_a_400_naming_the_row_and_column(
    busy_day: Any, operator: Any, api_as: Any, _case: str, text: str, message: str
) -> None:
    data = text.encode("latin-1")
    upload = SimpleUploadedFile("trace.csv", data, content_type="text/csv")
    body = {"group": busy_day.group_id, "trace": upload}
    response = api_as(operator).post("/api/v1/what-if/", body, format="multipart")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"trace": [message]}


def test_the_page_takes_a_sharing_mode_team_caps_and_an_uploaded_trace(
    busy_day: Any, operator: Any
) -> None:
    client = Client()
    client.force_login(operator)
    form = {"group": busy_day.group_id, "days": 1, "add_count": 0, "remove_count": 0}
    page = client.post(
        "/cluster/what-if/", {**form, "sharing_mode": "timeslice", "timeslice_replicas": 4}
    ).content.decode()
    assert '<td data-testid="sharing-1">timeslice</td>' in page
    assert '<td data-testid="waits-1">0 s / 0 s / 0 s</td>' in page
    # a cap per known team, a number each (issue 38 #15: choices, not free text)
    capped = client.post("/cluster/what-if/", {**form, "team_gpus_team-a": 0}).content.decode()
    assert '<td data-testid="never-1">3</td>' in capped
    bad_caps = client.post("/cluster/what-if/", {**form, "team_gpus_team-a": -1}).content.decode()
    assert (
        'data-testid="error-team_gpus_team-a">Ensure this value is greater than or equal to 0.</span>'
        in bad_caps
    )
    upload = SimpleUploadedFile("trace.csv", TRACE.encode(), content_type="text/csv")
    uploaded = client.post("/cluster/what-if/", {**form, "trace": upload}).content.decode()
    assert "3 requests of the uploaded trace (1 day)" in uploaded
    broken = SimpleUploadedFile("trace.csv", b"name\np0\n", content_type="text/csv")
    wrong = client.post("/cluster/what-if/", {**form, "trace": broken}).content.decode()
    assert 'data-testid="error-trace">Missing columns:' in wrong
    no_profiles = client.post("/cluster/what-if/", {**form, "sharing_mode": "mig"}).content.decode()
    assert 'data-testid="error-mig_profiles">' in no_profiles
