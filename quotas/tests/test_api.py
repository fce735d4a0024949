"""Quotas API: authorization matrix, If-Match concurrency, validation, what-if, history, status."""

from __future__ import annotations

import pytest

from quotas.models import Quota, QuotaChange, QuotaGroup
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node, make_workload

pytestmark = pytest.mark.django_db

BIG = {"gpu_max_gpu_memory_mib": 10**7, "gpu_max_cpu_milli": 10**6, "gpu_max_memory_mib": 10**8}


@pytest.fixture
def setup(team_a, team_b):
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=8)
    qa = QuotaFactory(
        group=group, tenant=team_a, gpu_min_gpu_milli=2000, gpu_max_gpu_milli=6000, **BIG
    )
    other = QuotaGroupFactory(name="interactive")
    qb = QuotaFactory(group=other, tenant=team_b, gpu_max_gpu_milli=1000)
    return group, qa, qb


def _url(quota, suffix=""):
    return f"/api/v1/quotas/{quota.pk}/{suffix}"


def _snapshot_rows():
    return (
        list(Quota.objects.order_by("pk").values()),
        QuotaChange.objects.count(),
        list(QuotaGroup.objects.order_by("pk").values()),
    )


@pytest.mark.parametrize(
    ("_case", "persona", "expected"),
    [
        (
            "tenant admin reads, cannot write",
            "alice",
            {
                "list": ["team-a"],
                "get": 200,
                "patch": 403,
                "whatif": 403,
                "history": 200,
                "create": 403,
                "delete": 403,
                "groups": ["training"],
            },
        ),
        (
            "member reads, cannot write",
            "bob",
            {
                "list": ["team-a"],
                "get": 200,
                "patch": 403,
                "whatif": 403,
                "history": 200,
                "create": 403,
                "delete": 403,
                "groups": ["training"],
            },
        ),
        (
            "other tenant sees nothing",
            "charlie",
            {
                "list": ["team-b"],
                "get": 404,
                "patch": 404,
                "whatif": 404,
                "history": 404,
                "create": 403,
                "delete": 404,
                "groups": ["interactive"],
            },
        ),
        (
            "operator does everything",
            "operator",
            {
                "list": ["team-a", "team-b"],
                "get": 200,
                "patch": 200,
                "whatif": 200,
                "history": 200,
                "create": 201,
                "delete": 204,
                "groups": ["interactive", "training"],
            },
        ),
    ],
)
def test_authorization_matrix(setup, api_as, request, team_b, _case, persona, expected):
    group, qa, _ = setup
    client = api_as(request.getfixturevalue(persona))
    listed = client.get("/api/v1/quotas/")
    assert sorted(q["name"] for q in listed.json()["results"]) == expected["list"]
    groups = client.get("/api/v1/quota-groups/")
    assert [g["name"] for g in groups.json()["results"]] == expected["groups"]
    assert client.get(_url(qa)).status_code == expected["get"]
    assert client.get(_url(qa, "history/")).status_code == expected["history"]
    before = _snapshot_rows()
    patch = client.patch(_url(qa), {"gpu_max_gpu_milli": 7000}, format="json", HTTP_IF_MATCH='"1"')
    assert patch.status_code == expected["patch"]
    assert (
        client.post(_url(qa, "what-if/"), {"gpu_min_gpu_milli": 3000}, format="json").status_code
        == (expected["whatif"])
    )
    if expected["patch"] != 200:
        assert _snapshot_rows() == before
    created = client.post(
        "/api/v1/quotas/",
        {"group": group.pk, "tenant": team_b.slug, "gpu_max_gpu_milli": 1000},
        format="json",
    )
    assert created.status_code == expected["create"]
    fresh = Quota.objects.get(group=group, tenant__slug="team-a")
    deleted = client.delete(_url(fresh), HTTP_IF_MATCH=f'"{fresh.version}"')
    assert deleted.status_code == expected["delete"]
    assert Quota.objects.filter(pk=qa.pk).exists() is (expected["delete"] != 204)


def test_detail_has_etag_runtime_and_headroom(setup, api_as, bob):
    _, qa, _ = setup
    make_workload(qa, gpu_count=1)
    response = api_as(bob).get(_url(qa))
    assert response["ETag"] == '"1"'
    body = response.json()
    assert body["status"]["gpu"]["used"]["gpu_milli"] == 1000
    assert body["status"]["gpu"]["runtime"]["gpu_milli"] == 1000
    assert body["status"]["gpu"]["headroom"]["gpu_milli"] == 5000
    assert body["status"]["gpu"]["guaranteed_headroom"]["gpu_milli"] == 1000
    assert body["status"]["headroom_text"] == "You can start 5 more GPUs now, 1 of them guaranteed."


def test_two_updates_with_the_same_if_match_one_wins_one_gets_412(setup, api_as, operator):
    _, qa, _ = setup
    client = api_as(operator)
    first = client.patch(_url(qa), {"gpu_max_gpu_milli": 7000}, format="json", HTTP_IF_MATCH='"1"')
    second = client.patch(_url(qa), {"gpu_max_gpu_milli": 5000}, format="json", HTTP_IF_MATCH='"1"')
    assert (first.status_code, second.status_code) == (200, 412)
    assert first["ETag"] == '"2"'
    assert second.json()["error"]["code"] == "precondition_failed"
    assert second["ETag"] == '"2"'
    assert Quota.objects.get(pk=qa.pk).gpu_max_gpu_milli == 7000
    assert QuotaChange.objects.filter(action="updated").count() == 1


def test_update_without_if_match_is_428(setup, api_as, operator):
    _, qa, _ = setup
    response = api_as(operator).patch(_url(qa), {"gpu_max_gpu_milli": 7000}, format="json")
    assert response.status_code == 428
    assert Quota.objects.get(pk=qa.pk).version == 1


@pytest.mark.parametrize(
    ("_case", "payload", "field"),
    [
        ("min above max", {"gpu_min_gpu_milli": 7000}, "gpu_min_gpu_milli"),
        ("negative", {"cpu_max_memory_mib": -5}, "cpu_max_memory_mib"),
        ("not a number", {"gpu_max_gpu_milli": "many"}, "gpu_max_gpu_milli"),
        (
            "mins above capacity",
            {"gpu_min_gpu_milli": 9000, "gpu_max_gpu_milli": 9000},
            "gpu_min_gpu_milli",
        ),
    ],
)
def test_invalid_update_is_400_with_fields_and_changes_nothing(
    setup, api_as, operator, _case, payload, field
):
    _, qa, _ = setup
    before = _snapshot_rows()
    response = api_as(operator).patch(_url(qa), payload, format="json", HTTP_IF_MATCH='"1"')
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]
    assert _snapshot_rows() == before


def test_update_returns_reclaim_warning_and_history(setup, api_as, operator):
    _, qa, _ = setup
    make_workload(qa, gpu_count=3)
    client = api_as(operator)
    response = client.patch(
        _url(qa), {"gpu_max_gpu_milli": 2000, "note": "budget"}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert response.status_code == 200
    assert "will trigger reclaim" in response.json()["warnings"][0]
    history = client.get(_url(qa, "history/")).json()
    assert [(h["action"], h["actor"], h["note"], h["changed"]) for h in history["results"]] == [
        ("updated", "operator", "budget", [["gpu_max_gpu_milli", 6000, 2000]]),
    ]


def test_history_is_a_cursor_page_newest_first_as_the_schema_says(setup, api_as, operator):
    # issue 14: the schema promised PaginatedQuotaChangeList, the view answered a bare list
    _, qa, _ = setup
    client = api_as(operator)
    for version, limit in enumerate((5000, 4000, 3000), start=1):
        response = client.patch(
            _url(qa), {"gpu_max_gpu_milli": limit}, format="json", HTTP_IF_MATCH=f'"{version}"'
        )
        assert response.status_code == 200
    first = client.get(_url(qa, "history/?limit=2")).json()
    assert sorted(first) == ["next", "previous", "results"]
    assert [h["changed"][0][2] for h in first["results"]] == [3000, 4000]
    assert first["previous"] is None
    rest = client.get(first["next"]).json()
    assert [h["changed"][0][2] for h in rest["results"]] == [5000]
    assert rest["next"] is None


def test_what_if_returns_siblings_before_and_after(setup, api_as, operator, team_b):
    group, qa, _ = setup
    qb2 = QuotaFactory(group=group, tenant=team_b, gpu_max_gpu_milli=8000, **BIG)
    make_workload(qa, state="pending", gpu_count=6, cpu_milli=0, memory_mib=0)
    make_workload(qb2, state="pending", gpu_count=8, cpu_milli=0, memory_mib=0)
    response = api_as(operator).post(
        _url(qa, "what-if/"), {"gpu_min_gpu_milli": 5000}, format="json"
    )
    assert response.status_code == 200
    rows = {
        r["name"]: (r["gpu_before"]["gpu_milli"], r["gpu_after"]["gpu_milli"])
        for r in response.json()
    }
    # before: a gets its min 2, then the 6 idle GPUs split by weight 6000:8000 (2.571 and 3.429)
    assert rows == {"team-a": (4571, 6000), "team-b": (3429, 2000)}
    assert Quota.objects.get(pk=qa.pk).gpu_min_gpu_milli == 2000


def test_create_quota_and_group_through_the_api(api_as, operator, team_a):
    make_node("n1", pool="batch", gpu_count=2)
    client = api_as(operator)
    group = client.post(
        "/api/v1/quota-groups/",
        {"name": "batch", "node_selector": {"pool": "batch"}},
        format="json",
    )
    assert group.status_code == 201
    assert group.json()["capacity"]["gpu"]["gpu_milli"] == 2000
    created = client.post(
        "/api/v1/quotas/",
        {
            "group": group.json()["id"],
            "tenant": "team-a",
            "gpu_min_gpu_milli": 1000,
            "gpu_max_gpu_milli": 2000,
        },
        format="json",
    )
    assert created.status_code == 201
    assert (created.json()["name"], created.json()["version"], created.json()["warnings"]) == (
        "team-a",
        1,
        [],
    )
    bad = client.post(
        "/api/v1/quotas/", {"group": group.json()["id"], "tenant": "nobody"}, format="json"
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {"tenant": ["No such tenant."]}
    patched = client.patch(
        f"/api/v1/quota-groups/{group.json()['id']}/",
        {"description": "nightly"},
        format="json",
        HTTP_IF_MATCH='"1"',
    )
    assert (patched.status_code, patched.json()["version"]) == (200, 2)


def test_list_query_count_does_not_grow_with_quotas(
    setup, api_as, operator, django_assert_max_num_queries
):
    group, _, _ = setup
    from portal.tests.factories import TenantFactory

    for index in range(6):
        QuotaFactory(group=group, tenant=TenantFactory(slug=f"extra-{index}"))
    client = api_as(operator)
    # 22: the group's budgets and active loans are read once per group (fairness over time)
    with django_assert_max_num_queries(22):
        response = client.get("/api/v1/quotas/")
    assert len(response.json()["results"]) == 8


def test_group_what_if_previews_a_new_quota(setup, api_as, operator, bob, team_b):
    group, qa, _ = setup
    make_workload(qa, state="pending", gpu_count=6, cpu_milli=0, memory_mib=0)
    url = f"/api/v1/quota-groups/{group.pk}/what-if/"
    payload = {"tenant": "team-b", "gpu_min_gpu_milli": 4000, "gpu_max_gpu_milli": 4000}
    response = api_as(operator).post(url, payload, format="json")
    assert response.status_code == 200
    rows = {
        r["name"]: (r["gpu_before"]["gpu_milli"], r["gpu_after"]["gpu_milli"])
        for r in response.json()
    }
    # team-b is new and idle: it lends its min, so team-a keeps all 6 it asks for
    assert rows == {"team-a": (6000, 6000), "team-b": (0, 0)}
    assert Quota.objects.filter(group=group).count() == 1
    assert api_as(bob).post(url, payload, format="json").status_code == 403
    bad = api_as(operator).post(url, {**payload, "gpu_min_gpu_milli": 9000}, format="json")
    assert bad.status_code == 400
    assert list(bad.json()["error"]["fields"]) == ["gpu_min_gpu_milli"]
