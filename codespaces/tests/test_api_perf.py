"""The codespace list and submit hot paths (issue 7 speed targets): exact query budgets, and the hand-written
`CodespaceSerializer.to_representation` renders exactly what DRF's field machinery renders."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework import serializers

from codespaces.api.serializers import CodespaceSerializer, codespace_rows
from codespaces.api.views import serializable_codespaces
from codespaces.choices import CodespaceState as S
from codespaces.choices import GpuMode
from codespaces.models import Codespace
from codespaces.tests.factories import CodespaceFactory, TemplatePresetFactory, workload_in
from portal import compiled_query
from scheduling.models import Workload

pytestmark = pytest.mark.django_db

CPU = {"template": "pytorch", "gpu_mode": "none", "cpu_milli": 1000, "memory_mib": 2048}


def _drf_generic(codespace: Codespace) -> dict[str, Any]:
    """What ModelSerializer's per-field to_representation makes of the declared fields."""
    return dict(serializers.ModelSerializer.to_representation(CodespaceSerializer(), codespace))


def test_fast_representation_matches_drf_fields_in_every_shape(
    bob: Any, team_a: Any, quota_a: Any, template: Any, api_as: Any
) -> None:
    created = api_as(bob).post("/api/v1/codespaces/", {**CPU, "name": "queued"}, format="json")
    assert created.status_code == 201, created.json()
    # a queued codespace shows its workload's reason and position, not its own stale ones
    Workload.objects.filter(pk=created.json()["workload"]).update(
        pending_reason="team-a CPU side: 4 of max 4 CPU in use.", queue_position=3
    )
    now = timezone.now()
    preset = TemplatePresetFactory(template=template, name="small")
    CodespaceFactory(owner=bob, tenant=team_a, quota=quota_a, template=template, preset=preset)
    CodespaceFactory(
        owner=bob,
        tenant=team_a,
        quota=quota_a,
        template=template,
        state=S.RUNNING,
        workload=workload_in(quota_a, "running"),
        started_at=now,
        last_activity_at=now - timedelta(minutes=3),
        idle_warned_at=now,
        gpu_hours_freed=1.5,
    )
    CodespaceFactory(
        owner=bob,
        tenant=team_a,
        quota=quota_a,
        template=template,
        state=S.STOPPED,
        gpu_mode=GpuMode.WHOLE,
        gpu_count=2,
        gpu_milli=1000,
        gpu_model="H100",
        stopped_at=now,
    )
    rows = list(serializable_codespaces(Codespace.objects.all()))
    assert {row.state for row in rows} == {S.QUEUED, S.RUNNING, S.STOPPED}
    assert any(row.workload_id for row in rows)
    assert any(row.preset_id for row in rows)
    flat = {row["id"]: row for row in codespace_rows(Codespace.objects.all())}
    assert set(flat) == {row.pk for row in rows}
    for row in rows:
        generic = _drf_generic(Codespace.objects.get(pk=row.pk))
        fast = CodespaceSerializer(row).data
        assert fast == generic
        assert list(fast) == list(CodespaceSerializer().fields)
        # the list's flat row (no model instance) renders the same
        assert CodespaceSerializer(flat[row.pk]).data == generic
    queued = CodespaceSerializer(flat[created.json()["id"]]).data
    assert (queued["pending_reason"], queued["queue_position"]) == (
        "team-a CPU side: 4 of max 4 CPU in use.",
        3,
    )
    running = next(r for r in rows if r.state == S.RUNNING)
    assert CodespaceSerializer(running).data["ide_url"] == running.ide_url()


@pytest.mark.parametrize("rows", [1, 20])
def test_list_costs_three_queries_whatever_the_rows(
    rows: int,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    api_as: Any,
    django_assert_num_queries: Any,
) -> None:
    preset = TemplatePresetFactory(template=template, name="small")
    for index in range(rows):
        CodespaceFactory(
            owner=bob,
            tenant=team_a,
            quota=quota_a,
            template=template,
            preset=preset if index % 2 else None,
            state=S.RUNNING if index % 3 else S.QUEUED,
        )
    api = api_as(bob)
    api.get("/api/v1/me/")  # the token's last-used write happens at most once a minute
    with django_assert_num_queries(3):  # token with memberships, rate-limit upsert, the page
        response = api.get("/api/v1/codespaces/?limit=20")
    assert response.status_code == 200
    assert len(response.json()["results"]) == rows


def test_retrieve_costs_three_queries(
    bob: Any, team_a: Any, quota_a: Any, template: Any, api_as: Any, django_assert_num_queries: Any
) -> None:
    codespace = CodespaceFactory(owner=bob, tenant=team_a, quota=quota_a, template=template)
    api = api_as(bob)
    api.get("/api/v1/me/")
    with django_assert_num_queries(3):
        response = api.get(f"/api/v1/codespaces/{codespace.pk}/")
    assert response.json()["name"] == codespace.name


def test_cpu_submit_query_budget(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    api_as: Any,
    django_assert_num_queries: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    api = api_as(bob)
    api.get("/api/v1/me/")
    # API layer (the request's transaction, a savepoint here: 2; the key's lock, its record and the
    # token with memberships and team slugs sent together: 3; rate upsert; stored answer 1), validation (template with its allow-list flag, quota with its pool:
    # 2; the team comes from the token lookup on PostgreSQL, a query elsewhere; a name clash is the
    # unique constraint's), the create transaction (savepoint 2; on PostgreSQL the owner lock with
    # the three new rows' ids, the per-user count, then the workload, codespace and event INSERTs sent
    # together: 7; elsewhere the owner read, the count, four writes with the workload link UPDATE: 8);
    # the answer is rendered without a re-read. No nodes query: a CPU-only size needs no GPU model
    # check. (Outside the tests' transaction the savepoints are BEGIN/COMMIT.)
    with (
        django_capture_on_commit_callbacks() as callbacks,
        django_assert_num_queries(16 if connection.vendor == "postgresql" else 17) as ctx,
    ):
        response = api.post(
            "/api/v1/codespaces/",
            {**CPU, "name": "cpu-one"},
            format="json",
            HTTP_IDEMPOTENCY_KEY="a",
        )
    assert response.status_code == 201, response.json()
    assert response.json()["state"] == S.QUEUED
    # the answer is built from the service's instance, not re-read: it equals what a read returns
    assert response.json() == api.get(f"/api/v1/codespaces/{response.json()['id']}/").json()
    assert not any("scheduling_node" in q["sql"] for q in ctx.captured_queries)
    assert len(callbacks) == 1  # the scheduling cycle trigger, after commit


LIST_QUERIES = [
    "limit=3",
    "limit=50",
    "scope=mine&limit=4",
    "scope=team",
    "state=running,stopped&limit=2",
    "state=queued&template=pytorch",
    "tenant=team-a,team-b&limit=5",
    "tenant=team-b",
    "ordering=name&limit=3",
    "ordering=-created_at&limit=2",
]


def _walk(api: Any, query: str) -> list[dict[str, Any]]:
    """Every page of a list, forward to the end and back to the start by the cursor links."""
    pages = [api.get(f"/api/v1/codespaces/?{query}").json()]
    while pages[-1]["next"] and len(pages) < 20:
        pages.append(api.get(pages[-1]["next"]).json())
    while pages[-1]["previous"] and len(pages) < 40:
        pages.append(api.get(pages[-1]["previous"]).json())
    return pages


@pytest.mark.parametrize("who", ["bob", "alice", "charlie", "operator"])
def test_compiled_list_pages_equal_the_plain_orm_pages(
    who: str,
    request: Any,
    team_a: Any,
    team_b: Any,
    quota_a: Any,
    quota_b: Any,
    template: Any,
    api_as: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The list runs SQL compiled once per query shape (portal.compiled_query); with compilation off
    every page — filters, scopes, orderings, cursors both ways, other people's views — is identical."""
    users = {
        name: request.getfixturevalue(name) for name in ("bob", "alice", "charlie", "operator")
    }
    for index in range(9):
        team, quota = (team_a, quota_a) if index % 3 else (team_b, quota_b)
        owner = users["charlie"] if team == team_b else users["bob" if index % 2 else "alice"]
        CodespaceFactory(
            owner=owner,
            tenant=team,
            quota=quota,
            template=template,
            name=f"cs-{(index * 7) % 9}",
            state=[S.QUEUED, S.RUNNING, S.STOPPED][index % 3],
        )
    api = api_as(users[who])
    compiled_query.clear_cache()
    compiled = {query: _walk(api, query) for query in LIST_QUERIES}
    shapes = [v for v in compiled_query._cache.values() if isinstance(v, compiled_query._Compiled)]
    # the pages above did run compiled SQL (an empty IN list, a datetime cursor are evaluated plainly)
    assert len(shapes) >= len(LIST_QUERIES) // 2
    monkeypatch.setattr(
        compiled_query.CompiledQuerySet, "_compile", lambda self: compiled_query._UNCOMPILABLE
    )
    compiled_query.clear_cache()
    for query in LIST_QUERIES:
        assert _walk(api, query) == compiled[query], query
    seen = {
        row["tenant"] for pages in compiled.values() for page in pages for row in page["results"]
    }
    assert seen == (
        {"team-a", "team-b"} if who == "operator" else {users[who].memberships.get().tenant.slug}
    )


def test_rows_written_by_the_fast_insert_equal_what_save_writes(
    bob: Any, team_a: Any, quota_a: Any, template: Any
) -> None:
    """`portal.db.insert` sends str/int/bool values of Django's own fields as they are: the stored
    rows (enums, booleans, foreign keys, JSON, timestamps) must be exactly what save() stores."""
    from codespaces.choices import GpuMode
    from codespaces.models import Codespace, CodespaceEvent
    from portal.db import insert
    from scheduling.models import Workload

    def build(name: str) -> tuple[Codespace, Workload]:
        workload = Workload(
            tenant=team_a,
            quota=quota_a,
            owner=bob,
            kind="codespace",
            name=name,
            cpu_milli=1500,
            memory_mib=2048,
            gpu_models=["H100"],
            node_labels={"zone": "a"},
            preemptible=True,
            home_volume=name,
            home_volume_gib=10,
        )
        codespace = Codespace(
            name=name,
            owner=bob,
            tenant=team_a,
            quota=quota_a,
            template=template,
            image="python:3.11",
            gpu_mode=GpuMode.SLICE,
            gpu_count=1,
            gpu_milli=250,
            gpu_memory_mib=20480,
            gpu_model="H100",
            cpu_milli=1500,
            memory_mib=2048,
            home_gib=10,
            state=S.QUEUED,
            last_activity_at=timezone.now(),
        )
        return codespace, workload

    rows = []
    for name, write in (("fast", insert), ("saved", lambda o: o.save(force_insert=True))):
        codespace, workload = build(name)
        write(workload)
        codespace.workload = workload
        write(codespace)
        event = CodespaceEvent(
            codespace=codespace, kind="created", message="m", actor=bob, to_state=S.QUEUED
        )
        write(event)
        rows.append(
            [
                _comparable(model.objects.filter(pk=pk).values().get())
                for model, pk in (
                    (Workload, workload.pk),
                    (Codespace, codespace.pk),
                    (CodespaceEvent, event.pk),
                )
            ]
        )
    assert rows[0] == rows[1]


def _comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A stored row without what differs between two writes by design (ids, names, timestamps)."""
    skipped = ("id", "name", "home_volume", "workload_id", "codespace_id")
    return {
        key: value
        for key, value in row.items()
        if key not in skipped and not key.endswith("_at") and not key.startswith("created")
    }


@pytest.mark.parametrize("rows", [1, 2])  # the template allows two per user
def test_list_of_running_codespaces_reads_their_placements_in_one_query(
    rows: int,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    api_as: Any,
    django_assert_num_queries: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given running codespaces whose node comes from their workload's placement (issue 24: derived,
    # not copied), one query for the page's placements whatever the rows
    from codespaces import services
    from codespaces.tests.test_services import run_status_sync

    size = services.SizeRequest(gpu_mode="none", cpu_milli=1000, memory_mib=2048)
    for index in range(rows):
        with django_capture_on_commit_callbacks(execute=True):
            services.create_codespace(
                user=bob, tenant=team_a, template="pytorch", name=f"cpu-{index}", size=size
            )
    run_status_sync(django_capture_on_commit_callbacks)
    api = api_as(bob)
    api.get("/api/v1/me/")
    with django_assert_num_queries(4):  # token, rate limit, the page, the page's placements
        response = api.get("/api/v1/codespaces/?limit=20")
    results = response.json()["results"]
    assert [(r["state"], bool(r["node"])) for r in results] == [(S.RUNNING, True)] * rows
