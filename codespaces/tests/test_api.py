"""The codespaces API: the twins of the pages on the same services; errors in the one error body."""

from __future__ import annotations

import json
from typing import Any

import pytest

from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace, CodespaceTemplate
from codespaces.tests.factories import CodespaceFactory
from codespaces.tests.test_services import run_status_sync
from scheduling.models import Workload

pytestmark = pytest.mark.django_db

SLICE = {
    "name": "bob-dev",
    "template": "pytorch",
    "gpu_mode": "slice",
    "gpu_percent": 25,
    "gpu_memory_gib": 20,
    "gpu_model": "H100",
    "cpu_milli": 4000,
    "memory_mib": 16384,
}


def test_create_runs_then_stop_start_delete(
    bob: Any, quota_a: Any, template: Any, api_as: Any, django_capture_on_commit_callbacks: Any
) -> None:
    api = api_as(bob)
    capture = django_capture_on_commit_callbacks
    with capture(execute=True):
        created = api.post("/api/v1/codespaces/", SLICE, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    # the answer is written before the scheduling cycle (which runs on commit) places it
    assert (body["state"], body["node"], body["gpu_percent"], body["gpu_memory_gib"]) == (
        "queued",
        "",
        25.0,
        20.0,
    )
    run_status_sync(capture)
    pk = body["id"]
    shown = api.get(f"/api/v1/codespaces/{pk}/")
    assert (shown.json()["state"], shown.json()["node"]) == ("running", "h100-a")
    assert shown.json()["ide_url"] == "https://bob-dev.codespaces.example.com/"
    assert shown.json()["ssh_command"] == "ssh bob@bob-dev.codespaces.example.com"
    assert shown["ETag"] == f'"{shown.json()["version"]}"'

    with capture(execute=True):
        stopped = api.post(f"/api/v1/codespaces/{pk}/stop/")
    assert (stopped.status_code, stopped.json()["state"]) == (200, "stopped")
    again = api.post(f"/api/v1/codespaces/{pk}/stop/")
    assert again.status_code == 409
    assert again.json()["error"] == {
        "code": "illegal_transition",
        "message": "Codespace 'bob-dev' is stopped; only a queued, placed, starting or running "
        "codespace can be stopped.",
        "fields": {"state": ["Cannot stop a stopped codespace."]},
    }
    with capture(execute=True):
        started = api.post(f"/api/v1/codespaces/{pk}/start/")
    assert (started.status_code, started.json()["state"]) == (200, "queued")
    events = api.get(f"/api/v1/codespaces/{pk}/events/").json()
    assert [e["to_state"] for e in events][:5] == [
        "starting",
        "placed",
        "queued",
        "stopped",
        "stopping",
    ]
    with capture(execute=True):
        assert api.delete(f"/api/v1/codespaces/{pk}/").status_code == 204
    assert Codespace.objects.get(pk=pk).state == S.DELETED
    assert api.get(f"/api/v1/codespaces/{pk}/").status_code == 404


@pytest.mark.parametrize(
    ("_case", "changes", "fields"),
    [
        (
            "compute 0%",
            {"gpu_percent": 0},
            {"gpu_percent": ["Compute must be between 1% and 100% of one GPU (got 0%)."]},
        ),
        (
            "compute above 100%",
            {"gpu_percent": 120},
            {"gpu_percent": ["Compute must be between 1% and 100% of one GPU (got 120%)."]},
        ),
        (
            "GPU memory above the largest GPU",
            {"gpu_memory_gib": 100},
            {"gpu_memory_gib": ["100 GiB is more than the largest H100 GPU in pool gpu (80 GiB)."]},
        ),
        (
            "slice on a whole-card-only model",
            {"gpu_model": "T4", "gpu_memory_gib": 8},
            {"gpu_model": ["T4 GPUs can't be shared: choose whole cards or another model."]},
        ),
        ("unknown template", {"template": "nope"}, {"template": ["Unknown template nope."]}),
        ("unknown preset", {"preset": "huge"}, {"preset": ["Unknown size huge for pytorch."]}),
        (
            "CPU outside the template's range",
            {"cpu_milli": 100},
            {"cpu_milli": ["CPU must be between 0.5 and 16 cores for pytorch (got 0.1)."]},
        ),
        (
            "not a number",
            {"gpu_percent": "lots"},
            {"gpu_percent": ["A valid integer is required."]},
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_creates_nothing(
    _case: str,
    changes: dict[str, Any],
    fields: dict[str, Any],
    bob: Any,
    quota_a: Any,
    template: Any,
    api_as: Any,
) -> None:
    response = api_as(bob).post("/api/v1/codespaces/", {**SLICE, **changes}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert response.json()["error"]["fields"] == fields
    assert Codespace.objects.count() == 0
    assert Workload.objects.count() == 0


def test_name_clash_and_per_user_limit(
    bob: Any, quota_a: Any, template: Any, api_as: Any, django_capture_on_commit_callbacks: Any
) -> None:
    api = api_as(bob)
    with django_capture_on_commit_callbacks(execute=True):
        assert (
            api.post("/api/v1/codespaces/", {**SLICE, "preset": "cpu"}, format="json").status_code
            == 201
        )
        clash = api.post("/api/v1/codespaces/", {**SLICE, "preset": "cpu"}, format="json")
        assert clash.json()["error"]["fields"] == {
            "name": ["A codespace named 'bob-dev' already exists; choose another name."]
        }
        second = {**SLICE, "preset": "cpu", "name": "two"}
        assert api.post("/api/v1/codespaces/", second, format="json").status_code == 201
        third = api.post("/api/v1/codespaces/", {**second, "name": "three"}, format="json")
    assert third.status_code == 400
    assert third.json()["error"]["fields"] == {
        "template": ["Limit reached: 2 of 2 codespaces per user."]
    }
    assert Codespace.objects.count() == 2


def test_preview_and_presets(bob: Any, quota_a: Any, template: Any, api_as: Any) -> None:
    api = api_as(bob)
    preview = api.post(
        "/api/v1/codespaces/preview/",
        {k: v for k, v in SLICE.items() if k != "name"},
        format="json",
    )
    assert preview.status_code == 200
    assert preview.json()["starts_now"] is True
    assert preview.json()["node"] == "h100-a"
    too_big = api.post(
        "/api/v1/codespaces/preview/",
        {"template": "pytorch", "gpu_mode": "whole", "gpu_count": 2, "gpu_model": "H100"},
        format="json",
    )
    assert too_big.json()["starts_now"] is False
    assert too_big.json()["reason"] == "team-a GPU side: 0 of max 1 GPU in use, request 2."
    picker = api.get(f"/api/v1/templates/{template.pk}/presets/").json()
    assert picker["largest_free_slice_gpu_milli"] == 1000
    assert picker["largest_free_slice_gpu_memory_mib"] == 81920
    assert {p["preset"]["name"]: p["starts_now"] for p in picker["presets"]} == {
        "quarter-h100": True,
        "2x-h100": False,
        "t4": True,
        "cpu": True,
    }
    assert Workload.objects.count() == 0


@pytest.fixture
def bobs(bob: Any, team_a: Any, quota_a: Any, template: Any) -> Codespace:
    return CodespaceFactory(
        name="bobs", owner=bob, tenant=team_a, quota=quota_a, template=template, state=S.STOPPED
    )


# persona → (retrieve, in list, start, delete, savings)
MATRIX = {
    "bob": (200, True, 200, 204, 404),
    "alice": (200, True, 200, 204, 404),
    "charlie": (404, False, 404, 404, 404),
    "operator": (200, True, 200, 204, 200),
}


@pytest.mark.parametrize("persona", list(MATRIX))
def test_api_authorization_matrix(
    persona: str,
    request: Any,
    bobs: Codespace,
    alice: Any,
    charlie: Any,
    operator: Any,
    api_as: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    api = api_as(request.getfixturevalue(persona))
    retrieve, listed, start, delete, savings = MATRIX[persona]
    assert api.get(f"/api/v1/codespaces/{bobs.pk}/").status_code == retrieve
    ids = [c["id"] for c in api.get("/api/v1/codespaces/").json()["results"]]
    assert (bobs.pk in ids) is listed
    with django_capture_on_commit_callbacks(execute=True):
        assert api.post(f"/api/v1/codespaces/{bobs.pk}/start/").status_code == start
        # another user's codespace is deleted with a reason (the owner deletes without one)
        query = "" if persona == "bob" else "?reason=leaver"
        assert api.delete(f"/api/v1/codespaces/{bobs.pk}/{query}").status_code == delete
    assert Codespace.objects.get(pk=bobs.pk).state == (S.DELETED if delete == 204 else S.STOPPED)
    assert api.get("/api/v1/codespaces/savings/").status_code == savings


def test_same_team_member_who_is_not_owner_gets_403(
    bobs: Codespace, team_a: Any, api_as: Any
) -> None:
    from portal.tests.factories import MembershipFactory, UserFactory

    dora = UserFactory(username="dora")
    MembershipFactory(user=dora, tenant=team_a)
    api = api_as(dora)
    assert api.get(f"/api/v1/codespaces/{bobs.pk}/").status_code == 200
    refused = api.post(f"/api/v1/codespaces/{bobs.pk}/start/")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert Codespace.objects.get(pk=bobs.pk).state == S.STOPPED


def test_templates_read_for_members_write_for_operators(
    bob: Any, charlie: Any, operator: Any, team_b: Any, template: Any, api_as: Any
) -> None:
    private = CodespaceTemplate.objects.create(name="vision", display_name="Vision", image="v:1")
    private.allowed_tenants.set([team_b])
    assert [t["name"] for t in api_as(bob).get("/api/v1/templates/").json()["results"]] == [
        "pytorch"
    ]
    assert sorted(
        t["name"] for t in api_as(charlie).get("/api/v1/templates/").json()["results"]
    ) == [
        "pytorch",
        "vision",
    ]
    assert api_as(bob).get(f"/api/v1/templates/{private.pk}/").status_code == 404
    new = {
        "name": "rstudio",
        "display_name": "RStudio",
        "image": "r:4",
        "presets": [{"name": "cpu", "label": "CPU only", "gpu_mode": "none", "gpu_count": 0}],
    }
    assert api_as(bob).post("/api/v1/templates/", new, format="json").status_code == 403
    created = api_as(operator).post("/api/v1/templates/", new, format="json")
    assert created.status_code == 201, created.json()
    assert [p["name"] for p in created.json()["presets"]] == ["cpu"]
    ops = api_as(operator)
    url = f"/api/v1/templates/{created.json()['id']}/"
    assert ops.patch(url, {"max_per_user": 5}, format="json").status_code == 428
    etag = ops.get(url)["ETag"]
    updated = ops.patch(url, {"max_per_user": 5}, format="json", HTTP_IF_MATCH=etag)
    assert (updated.status_code, updated.json()["max_per_user"]) == (200, 5)
    stale = ops.patch(url, {"max_per_user": 6}, format="json", HTTP_IF_MATCH=etag)
    assert stale.status_code == 412
    bad = ops.post(
        "/api/v1/templates/",
        {
            **new,
            "name": "bad",
            "presets": [
                {
                    "name": "x",
                    "label": "x",
                    "gpu_mode": "slice",
                    "gpu_percent": 0,
                    "gpu_memory_gib": 1,
                }
            ],
        },
        format="json",
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {
        "presets": ["Preset 1: compute must be 1-100% (got 0%)."]
    }
    assert not CodespaceTemplate.objects.filter(name="bad").exists()
    twice = ops.post(
        "/api/v1/templates/",
        {**new, "name": "twice", "presets": [new["presets"][0], new["presets"][0]]},
        format="json",
    )  # the presets' unique name per template: a 400 naming the field, not the database's error
    assert twice.status_code == 400
    assert twice.json()["error"]["fields"] == {"presets": ["Preset 2: the name cpu is used twice."]}
    assert not CodespaceTemplate.objects.filter(name="twice").exists()


@pytest.mark.parametrize(
    ("_case", "changes", "fields"),
    [
        (
            "template that looks like a number",
            {"template": "³"},
            {"template": ["Unknown template (not a valid name)."]},
        ),
        (
            "template with lone surrogates",
            {"template": "\udadd\udf87x"},
            {"template": ["Unknown template (not a valid name)."]},
        ),
        (
            "GPU model the pool lacks",
            {"gpu_model": "H200", "gpu_memory_gib": 100},
            {"gpu_model": ["Pool gpu has no healthy H200 GPU (it has: H100, T4)."]},
        ),
    ],
)
def test_odd_input_is_a_clean_400(
    _case: str,
    changes: dict[str, Any],
    fields: dict[str, Any],
    bob: Any,
    quota_a: Any,
    template: Any,
    api_as: Any,
) -> None:
    # sent as raw JSON: "\\udadd" escapes decode to lone surrogates on the server, as schemathesis sends
    body = json.dumps({**SLICE, **changes}, ensure_ascii=True)
    response = api_as(bob).post("/api/v1/codespaces/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == fields
    assert Codespace.objects.count() == 0


def test_list_query_count_does_not_grow_with_rows(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    api_as: Any,
    django_assert_max_num_queries: Any,
) -> None:
    api = api_as(bob)
    CodespaceFactory(owner=bob, tenant=team_a, quota=quota_a, template=template)
    with django_assert_max_num_queries(12) as one:
        assert len(api.get("/api/v1/codespaces/").json()["results"]) == 1
    for _ in range(5):
        CodespaceFactory(owner=bob, tenant=team_a, quota=quota_a, template=template)
    with django_assert_max_num_queries(len(one.captured_queries)):
        assert len(api.get("/api/v1/codespaces/").json()["results"]) == 6


@pytest.mark.parametrize(
    ("_case", "changes", "field"),
    [
        (
            "idle window beyond 30 days",
            {"idle_window_minutes": 9_999_999_999},
            "idle_window_minutes",
        ),
        ("idle grace beyond 30 days", {"idle_grace_minutes": 43_201}, "idle_grace_minutes"),
        ("home volume beyond 1 PiB", {"home_volume_gib": 2**31 - 1}, "home_volume_gib"),
        ("per-user limit beyond 1000", {"max_per_user": 30_000}, "max_per_user"),
        ("CPU beyond 10,000 cores", {"max_cpu_milli": 2**31 - 1}, "max_cpu_milli"),
        (
            "a GPU model name of 10,000 characters",
            {"whole_card_models": ["T" * 10_000]},
            "whole_card_models",
        ),
        (
            "31 presets",
            {"presets": [{"name": f"p{i}", "label": "P", "gpu_mode": "none"} for i in range(31)]},
            "presets",
        ),
        ("100,000 teams", {"allowed_tenant_slugs": ["team-a"] * 100_000}, "allowed_tenant_slugs"),
        (
            "1,000 GPU model names",
            {"whole_card_models": [f"m{i}" for i in range(1000)]},
            "whole_card_models",
        ),
    ],
)
def test_a_template_out_of_bounds_is_refused_by_the_api(
    _case: str, changes: dict[str, Any], field: str, operator: Any, api_as: Any
) -> None:
    # issue 9/12: every number and string of a template has a bound
    body = {"name": "bounded", "display_name": "B", "image": "r:4", **changes}
    response = api_as(operator).post("/api/v1/templates/", body, format="json")
    assert response.status_code == 400, response.json()
    assert list(response.json()["error"]["fields"]) == [field]
    assert not CodespaceTemplate.objects.filter(name="bounded").exists()
