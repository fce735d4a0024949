"""Pages: the create form with its slice picker, detail, actions, lists; and who may see what."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace
from codespaces.tests.factories import CodespaceFactory, workload_in
from scheduling.models import Workload

pytestmark = pytest.mark.django_db


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def bobs(bob: Any, team_a: Any, quota_a: Any, template: Any) -> Codespace:
    return CodespaceFactory(
        name="bobs", owner=bob, tenant=team_a, quota=quota_a, template=template, state=S.STOPPED
    )


def test_create_page_shows_the_picker(bob: Any, quota_a: Any, template: Any) -> None:
    response = client_for(bob).get(reverse("codespaces:create"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "1 of max 1 GPUs" not in html
    assert "0 of max 1 GPU in use; 1 GPU / 80.0 GiB left" in html  # issue 38: not "1 GPUs"
    assert "100% compute, 80 GiB on one GPU" in html
    assert 'data-testid="preset-quarter-h100"' in html
    assert "team-a GPU side: 0 of max 1 GPU in use, request 2." in html  # 2 × H100 would queue


def test_create_through_the_form(
    bob: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client = client_for(bob)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("codespaces:create"),
            {
                "name": "bob-dev",
                "template": "pytorch",
                "quota": str(quota_a.pk),
                "preset": "custom",
                "gpu_mode": "slice",
                "gpu_percent": "25",
                "gpu_memory_gib": "20",
                "gpu_count": "1",
                "gpu_model": "H100",
                "cpu_cores": "4",
                "memory_gib": "16",
            },
        )
    codespace = Codespace.objects.get(name="bob-dev")
    assert response.status_code == 302
    assert response["Location"] == reverse("codespaces:detail", args=[codespace.pk])
    assert (codespace.gpu_milli, codespace.gpu_memory_mib, codespace.cpu_milli) == (
        250,
        20480,
        4000,
    )
    assert codespace.state == S.STARTING
    assert codespace.node_name == "h100-a"


@pytest.mark.parametrize(
    ("_case", "changes", "field", "error"),
    [
        ("compute 0%", {"gpu_percent": "0"}, "gpu_percent", "(got 0%)"),
        ("compute 150%", {"gpu_percent": "150"}, "gpu_percent", "(got 150%)"),
        (
            "memory above the largest GPU",
            {"gpu_memory_gib": "96"},
            "gpu_memory_gib",
            "96 GiB is more than the largest H100 GPU in pool gpu (80 GiB).",
        ),
        (
            "slice on a T4",
            {"gpu_model": "T4", "gpu_memory_gib": "8"},
            "gpu_model",
            "T4 GPUs can&#x27;t be shared",
        ),
        (
            "a GPU model the inventory lacks",
            {"gpu_model": '=HYPERLINK("http://evil","x")'},
            "gpu_model",
            "Select a valid choice.",
        ),
        ("unknown template", {"template": "nope"}, "template", "Select a valid choice."),
        ("bad name", {"name": "Not OK"}, "name", "lowercase letters"),
    ],
)
def test_form_errors_are_shown_next_to_the_field_and_nothing_is_created(
    _case: str,
    changes: dict[str, str],
    field: str,
    error: str,
    bob: Any,
    quota_a: Any,
    template: Any,
) -> None:
    data = {
        "name": "bob-dev",
        "template": "pytorch",
        "quota": str(quota_a.pk),
        "preset": "custom",
        "gpu_mode": "slice",
        "gpu_percent": "25",
        "gpu_memory_gib": "20",
        "gpu_count": "1",
        "gpu_model": "H100",
        "cpu_cores": "4",
        "memory_gib": "16",
        **changes,
    }
    response = client_for(bob).post(reverse("codespaces:create"), data)
    assert response.status_code == 200
    html = response.content.decode()
    assert f'data-field-error="{field}">' in html
    assert error in html
    assert Codespace.objects.count() == 0
    assert Workload.objects.count() == 0


def test_detail_actions_and_refusal_messages(
    bob: Any, bobs: Codespace, django_capture_on_commit_callbacks: Any
) -> None:
    client = client_for(bob)
    detail = reverse("codespaces:detail", args=[bobs.pk])
    assert 'data-testid="start"' in client.get(detail).content.decode()
    # stopping a stopped codespace is refused with a message, nothing changes
    response = client.post(reverse("codespaces:stop", args=[bobs.pk]), follow=True)
    assert "Codespace &#x27;bobs&#x27; is stopped; only a queued, placed, starting or running" in (
        response.content.decode()
    )
    assert Codespace.objects.get(pk=bobs.pk).state == S.STOPPED
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("codespaces:start", args=[bobs.pk]))
    assert Codespace.objects.get(pk=bobs.pk).state == S.STARTING
    response = client.post(reverse("codespaces:delete", args=[bobs.pk]))
    assert response["Location"] == reverse("codespaces:list")
    assert Codespace.objects.get(pk=bobs.pk).state == S.DELETED
    assert client.get(detail).status_code == 404


# persona → (detail, stop, list shows it, team page, all page, savings)
MATRIX = {
    "bob": (200, 302, True, 403, 404, 404),  # owner, member
    "alice": (200, 302, False, 200, 404, 404),  # tenant admin of team-a (not the owner)
    "charlie": (404, 404, False, 403, 404, 404),  # other tenant
    "operator": (200, 302, False, 200, 200, 200),
}


@pytest.mark.parametrize("persona", list(MATRIX))
def test_page_authorization_matrix(
    persona: str, request: Any, bobs: Codespace, alice: Any, charlie: Any, operator: Any
) -> None:
    user = request.getfixturevalue(persona)
    client = client_for(user)
    detail, stop, listed, team, everything, savings = MATRIX[persona]
    assert client.get(reverse("codespaces:detail", args=[bobs.pk])).status_code == detail
    Codespace.objects.filter(pk=bobs.pk).update(state=S.RUNNING)  # something to stop
    assert client.post(reverse("codespaces:stop", args=[bobs.pk])).status_code == stop
    expected_state = S.STOPPED if stop == 302 else S.RUNNING
    assert Codespace.objects.get(pk=bobs.pk).state == expected_state
    row = f'<tr data-codespace="{bobs.pk}">'
    assert (row in client.get(reverse("codespaces:list")).content.decode()) is listed
    assert client.get(reverse("codespaces:team")).status_code == team
    assert client.get(reverse("codespaces:all")).status_code == everything
    assert client.get(reverse("codespaces:savings")).status_code == savings
    status = client.get(reverse("codespaces:status-json") + f"?ids={bobs.pk}").json()
    assert [c["id"] for c in status["codespaces"]] == ([] if detail == 404 else [bobs.pk])


def test_member_of_the_team_who_is_not_the_owner_cannot_act(bobs: Codespace, team_a: Any) -> None:
    from portal.tests.factories import MembershipFactory, UserFactory

    dora = UserFactory(username="dora")
    MembershipFactory(user=dora, tenant=team_a)
    client = client_for(dora)
    assert client.get(reverse("codespaces:detail", args=[bobs.pk])).status_code == 200
    assert client.post(reverse("codespaces:start", args=[bobs.pk])).status_code == 403
    assert Codespace.objects.get(pk=bobs.pk).state == S.STOPPED


def test_idle_banner_and_keep(bob: Any, bobs: Codespace) -> None:
    from django.utils import timezone

    Codespace.objects.filter(pk=bobs.pk).update(
        state=S.RUNNING,
        desired_state="running",
        workload=workload_in(bobs.quota, "running"),
        idle_warned_at=timezone.now(),
    )
    client = client_for(bob)
    html = client.get(reverse("codespaces:detail", args=[bobs.pk])).content.decode()
    assert 'data-testid="idle-banner"' in html
    client.post(reverse("codespaces:keep", args=[bobs.pk]))
    assert Codespace.objects.get(pk=bobs.pk).idle_warned_at is None
    html = client.get(reverse("codespaces:detail", args=[bobs.pk])).content.decode()
    assert 'data-testid="idle-banner"' not in html


def test_preview_json_validates_and_answers(bob: Any, quota_a: Any, template: Any) -> None:
    client = client_for(bob)
    url = reverse("codespaces:preview-json")
    body = {
        "template": "pytorch",
        "quota": quota_a.pk,
        "gpu_mode": "slice",
        "gpu_percent": 25,
        "gpu_memory_gib": 20,
        "gpu_model": "H100",
        "cpu_cores": 4,
        "memory_gib": 16,
    }
    ok = client.post(url, body, content_type="application/json").json()
    assert ok == {
        "valid": True,
        "starts_now": True,
        "code": ok["code"],
        "reason": ok["reason"],
        "node": "h100-a",
    }
    bad = client.post(url, {**body, "gpu_percent": 0}, content_type="application/json")
    assert bad.status_code == 400
    assert bad.json()["fields"] == {
        "gpu_percent": ["Compute must be between 1% and 100% of one GPU (got 0%)."]
    }
    assert Workload.objects.count() == 0


PREVIEW_BODY = {
    "template": "pytorch",
    "gpu_mode": "slice",
    "gpu_percent": 25,
    "gpu_memory_gib": 20,
    "gpu_model": "H100",
    "cpu_cores": 4,
    "memory_gib": 16,
}


@pytest.mark.parametrize(
    ("_case", "raw", "field"),
    [
        ("a list", "[]", "non_field_errors"),
        ("a string", '"x"', "non_field_errors"),
        ("null", "null", "non_field_errors"),
        ("not JSON", "{", "non_field_errors"),
        ("cpu_cores inf", {"cpu_cores": "inf"}, "cpu_cores"),
        ("cpu_cores 1e400", '{"template": "pytorch", "cpu_cores": 1e400}', "cpu_cores"),
        ("cpu_cores NaN", '{"template": "pytorch", "cpu_cores": NaN}', "non_field_errors"),
        ("gpu_count a huge int", {"gpu_count": 10**30}, "gpu_count"),
        ("memory_gib a list", {"memory_gib": [1]}, "memory_gib"),
        ("quota a huge int", {"quota": "99999999999999999999999"}, "quota"),
        ("template with NUL", {"template": "py\x00torch"}, "template"),
        ("gpu_model 10,000 characters", {"gpu_model": "H" * 10_000}, "gpu_model"),
    ],
)
def test_preview_json_answers_bad_input_with_a_400_naming_the_field(
    _case: str, raw: Any, field: str, bob: Any, quota_a: Any, template: Any
) -> None:
    # issue 11: these bodies were 500s (AttributeError, OverflowError, a NUL in a query)
    import json

    body = raw if isinstance(raw, str) else json.dumps({**PREVIEW_BODY, **raw})
    response = client_for(bob).post(
        reverse("codespaces:preview-json"), body, content_type="application/json"
    )
    assert response.status_code == 400
    answer = response.json()
    assert answer["valid"] is False
    assert list(answer["fields"]) == [field]
    assert Workload.objects.count() == 0


@pytest.mark.parametrize(
    ("_case", "ids"),
    [("beyond a 64-bit integer", "99999999999999999999999"), ("not a number", "1,x")],
)
def test_status_json_refuses_ids_it_cannot_look_up(_case: str, ids: str, bob: Any) -> None:
    # issue 11: an id beyond the database's integer range was an OverflowError (500)
    response = client_for(bob).get(reverse("codespaces:status-json") + f"?ids={ids}")
    assert response.status_code == 400
    assert response.json() == {
        "error": "ids must be numbers (comma-separated codespace ids)",
        "fields": {"ids": ["Comma-separated codespace ids, each a number."]},
    }


def test_team_tab_only_for_admins(bob: Any, alice: Any, quota_a: Any) -> None:
    team_link = f'href="{reverse("codespaces:team")}"'
    assert team_link not in client_for(bob).get(reverse("codespaces:list")).content.decode()
    assert team_link in client_for(alice).get(reverse("codespaces:list")).content.decode()


def test_demo_seed_is_idempotent() -> None:
    import io

    from codespaces import demo
    from codespaces.models import CodespaceTemplate, TemplatePreset

    demo.seed(io.StringIO())
    demo.seed(io.StringIO())
    assert sorted(CodespaceTemplate.objects.values_list("name", flat=True)) == [
        "notebook",
        "pytorch",
    ]
    assert TemplatePreset.objects.count() == 8
    quarter = TemplatePreset.objects.get(template__name="pytorch", name="quarter-h100")
    assert (quarter.label, quarter.gpu_percent, quarter.gpu_memory_gib) == (
        "1/4 H100: 25% compute, 20 GiB",
        25,
        20,
    )


def test_status_json_feeds_the_sparkline_with_exact_samples(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from datetime import UTC, datetime, timedelta

    import time_machine

    from codespaces.tests.test_idle import FixedUtilization
    from codespaces.tests.test_services import create
    from scheduling.telemetry.ingestion import ingest_minute

    start = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False) as traveller:
        codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
        for minute, percent in ((1, 37.5), (2, 80.0)):
            traveller.move_to(start + timedelta(minutes=minute, seconds=10))
            ingest_minute(source=FixedUtilization(percent), rollup=False)
        traveller.move_to(start + timedelta(minutes=3))
        status = client_for(bob).get(reverse("codespaces:status-json") + f"?ids={codespace.pk}")
    [row] = status.json()["codespaces"]
    assert (row["state"], row["location"]) == ("running", f"h100-a / {codespace.gpu_names}")
    assert row["utilization"] == {
        "ts": ["2026-11-30T09:01:00+00:00", "2026-11-30T09:02:00+00:00"],
        "values": [37.5, 80.0],
    }


def test_full_demo_creates_placed_codespaces_once(django_capture_on_commit_callbacks: Any) -> None:
    import io

    from django.core.management import call_command

    from codespaces import demo
    from codespaces.models import Codespace

    # given the whole demo (users, cluster, quotas, templates, codespaces), its cycles run on commit
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_demo", stdout=io.StringIO())
    names = sorted(Codespace.objects.values_list("name", flat=True))
    assert names == sorted(c[4] for c in demo.CODESPACES)
    # then every demo codespace holds a slice on a GPU (the cluster page and savings have data)
    assert set(Codespace.objects.values_list("state", flat=True)) <= {
        "placed",
        "starting",
        "running",
    }
    # and seeding again creates nothing
    out = io.StringIO()
    demo.seed_codespaces(out)
    assert Codespace.objects.count() == len(demo.CODESPACES)
    assert "0 created" in out.getvalue()
