"""The defragmentation API: operators preview a pool's plan, read it and apply it once; members are
refused; bad input is a 400 naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.choices import WorkloadState
from scheduling.models import DefragPlan, Workload
from scheduling.tests.defrag_scenario import fragmented_pool

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _open_policy(settings: Any) -> None:
    settings.TESSERA_DEFRAG_MIN_RUNTIME_SECONDS = 0


def test_operator_previews_then_applies_a_plan_and_the_waiting_job_is_placed(
    operator: Any, team_a: Any, api_as: Any
) -> None:
    pool = fragmented_pool(team_a)
    client = api_as(operator)
    preview = client.post("/api/v1/defrag/plans/", {"group": pool.quota.group_id}, format="json")
    assert preview.status_code == 201, preview.json()
    body = preview.json()
    assert body["state"] == "previewed"
    assert len(body["moves"]) == 1
    assert body["unlocks"][0]["workload"] == pool.waiting.pk
    assert body["moves"][0]["reason"].startswith("Moved to free 1 H100 GPU on ")
    assert body["considered"]["summary"] == (
        "Looked at 1 waiting request and 2 running workloads; 2 may move."
    )
    assert body["considered"]["kept"] == []
    assert client.get(f"/api/v1/defrag/plans/{body['id']}/").json()["moves"] == body["moves"]

    applied = client.post(f"/api/v1/defrag/plans/{body['id']}/apply/")
    assert applied.status_code == 200, applied.json()
    assert applied.json()["state"] == "applied"
    assert Workload.objects.get(pk=pool.waiting.pk).state == WorkloadState.PLACED
    again = client.post(f"/api/v1/defrag/plans/{body['id']}/apply/")
    assert again.status_code == 200
    assert again.json() == applied.json()


def test_members_are_refused_every_defrag_operation(alice: Any, team_a: Any, api_as: Any) -> None:
    pool = fragmented_pool(team_a)
    client = api_as(alice)
    r = client.post("/api/v1/defrag/plans/", {"group": pool.quota.group_id}, format="json")
    assert r.status_code == 403
    assert DefragPlan.objects.count() == 0
    assert client.get("/api/v1/defrag/plans/").status_code == 403


@pytest.mark.parametrize(
    "body",
    [{}, {"group": "x"}, {"group": 0}, {"group": 10**30}, {"group": 987654}],
    ids=["missing", "text", "zero", "huge", "unknown"],
)
def test_a_bad_preview_request_is_a_400_naming_the_group(
    operator: Any, api_as: Any, body: dict[str, Any]
) -> None:
    r = api_as(operator).post("/api/v1/defrag/plans/", body, format="json")
    assert r.status_code == 400, r.content
    assert "group" in r.json()["error"]["fields"]
    assert DefragPlan.objects.count() == 0


def test_an_unknown_plan_is_a_404(operator: Any, api_as: Any) -> None:
    client = api_as(operator)
    assert client.get("/api/v1/defrag/plans/987654/").status_code == 404
    assert client.post("/api/v1/defrag/plans/987654/apply/").status_code == 404


def test_the_jobs_api_records_a_job_submitted_as_exempt_from_defragmentation(
    operator: Any, team_a: Any, api_as: Any
) -> None:
    pool = fragmented_pool(team_a)
    job = {
        "name": "pinned",
        "pods": 1,
        "quota": pool.quota.pk,
        "tenant": team_a.slug,
        "member": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1},
        "movable": False,
    }
    from scheduling.models import Gang

    r = api_as(operator).post("/api/v1/jobs/", job, format="json")
    assert r.status_code == 201, r.json()
    pinned = Gang.objects.get(name="pinned").members.get()
    assert pinned.movable is False
    assert api_as(operator).get(f"/api/v1/workloads/{pinned.pk}/").json()["movable"] is False


def test_an_empty_plan_tells_the_operator_why_the_work_stayed(
    operator: Any, team_a: Any, api_as: Any
) -> None:
    pool = fragmented_pool(team_a)
    Workload.objects.filter(pk__in=[pool.first.pk, pool.second.pk]).update(preemptible=False)
    body = (
        api_as(operator)
        .post("/api/v1/defrag/plans/", {"group": pool.quota.group_id}, format="json")
        .json()
    )
    assert body["moves"] == []
    assert body["considered"]["movable"] == 0
    assert body["considered"]["kept"] == [{"reason": "it is not preemptible", "count": 2}]
