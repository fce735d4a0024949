"""Issue 22: waste reports. Idle GPU-hours per team, person and template (threshold and window
configurable), never-used codespaces, jobs whose GPUs sit idle and the top savings, on a page, as CSV
and as the weekly digest to the team's admins."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.core import mail
from django.test import Client

from codespaces.models import Codespace
from codespaces.services.waste import WastePolicy, send_waste_digests, waste_report
from codespaces.tests.test_services import create
from scheduling.models import Workload
from scheduling.telemetry.models import WorkloadHourly
from scheduling.telemetry.tests.builders import make_workload

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def hours(workload: Workload, count: int, *, use_percent: float, ending: datetime = NOW) -> None:
    """`count` hour rows ending at `ending`, the workload holding its allocation all hour and using
    `use_percent` of it (idle_milli_minutes as the rollup writes it at 5 %)."""
    milli = workload.gpu_milli * workload.gpu_count
    for i in range(1, count + 1):
        allocated = milli * 60.0
        WorkloadHourly.objects.create(
            hour=ending - timedelta(hours=i), workload=workload, tenant=workload.tenant,
            quota=workload.quota, kind=workload.kind, minutes=60,
            allocated_milli_minutes=allocated, used_milli_minutes=allocated * use_percent / 100,
            idle_milli_minutes=allocated if use_percent < 5 else 0.0,
        )  # fmt: skip


@pytest.fixture
def wasteful_team(
    alice: Any, bob: Any, team_a: Any, quota_a: Any, template: Any,
    django_capture_on_commit_callbacks: Any,
) -> Any:  # fmt: skip
    """team-a: bob-dev (25 %, idle 48 h, created 3 days ago), alice-nb (25 %, 10 h at 50 %), bob-new
    (25 %, created now, no hours yet) and a whole-GPU job train-idle (idle 5 h)."""
    capture = django_capture_on_commit_callbacks
    with time_machine.travel(NOW - timedelta(hours=1), tick=False):
        dev = create(bob, team_a, "bob-dev", capture)
        notebook = create(alice, team_a, "alice-nb", capture)
        create(bob, team_a, "bob-new", capture)
    Codespace.objects.filter(pk__in=[dev.pk, notebook.pk]).update(
        created_at=NOW - timedelta(days=3)
    )
    hours(dev.workload, 48, use_percent=0.0)
    hours(notebook.workload, 10, use_percent=50.0)
    job = make_workload(quota_a, "train-idle", gpu_milli=1000)
    hours(job, 5, use_percent=1.0)
    return team_a


def test_the_report_counts_idle_gpu_hours_by_person_and_template(wasteful_team):
    report = waste_report(wasteful_team, NOW, WastePolicy(idle_percent=5, window_days=7))

    # 12 idle GPU-hours of bob-dev (0.25 × 48) + 5 of the job; alice's 2.5 were busy
    assert (report.allocated_gpu_hours, report.idle_gpu_hours) == (19.5, 17.0)
    assert [(x.name, x.allocated_gpu_hours, x.idle_gpu_hours) for x in report.by_person] == [
        ("bob", 12.0, 12.0),
        ("(no owner)", 5.0, 5.0),
        ("alice", 2.5, 0.0),
    ]
    assert [(x.name, x.allocated_gpu_hours, x.idle_gpu_hours) for x in report.by_template] == [
        ("pytorch", 14.5, 12.0),
        ("(jobs, no template)", 5.0, 5.0),
    ]
    assert [(j.name, j.idle_gpu_hours) for j in report.idle_jobs] == [("train-idle", 5.0)]
    # bob-new is younger than a day; alice-nb was used
    assert [c.name for c in report.never_used] == ["bob-dev"]
    assert [(s.name, s.owner, s.gpus) for s in report.savings] == [("bob-dev", "bob", 0.25)]
    assert report.headline == "Stopping this codespace frees 0.25 GPUs."


def test_threshold_and_window_are_configurable(wasteful_team):
    # at 60 % alice's busy hours (50 %) count as idle too
    strict = waste_report(wasteful_team, NOW, WastePolicy(idle_percent=60, window_days=7))
    assert strict.idle_gpu_hours == 19.5
    assert [s.name for s in strict.savings] == ["bob-dev", "alice-nb"]  # most idle first
    assert strict.headline == "Stopping these 2 codespaces frees 0.5 GPUs."
    # over one day only the last 24 hours of bob-dev (6 GPU-hours) and everything else count
    day = waste_report(wasteful_team, NOW, WastePolicy(idle_percent=5, window_days=1))
    assert (day.allocated_gpu_hours, day.idle_gpu_hours) == (13.5, 11.0)


def test_the_weekly_report_page_and_csv_for_the_team_admin(wasteful_team, alice, settings):
    settings.TESSERA_WASTE_IDLE_PERCENT = 5.0
    client = Client()
    client.force_login(alice)
    with time_machine.travel(NOW, tick=False):
        page = client.get("/codespaces/waste/?team=team-a")
        text = client.get("/codespaces/waste.csv?team=team-a").content.decode()
    html = page.content.decode()
    assert page.status_code == 200
    assert "GPU waste of team team-a" in html
    assert "Stopping this codespace frees 0.25 GPUs." in html
    assert 'data-testid="idle">17<' in html
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["kind"], r["name"], r["idle_gpu_hours"]) for r in rows] == [
        ("person", "bob", "12.000"),
        ("person", "(no owner)", "5.000"),
        ("person", "alice", "0.000"),
        ("template", "pytorch", "12.000"),
        ("template", "(jobs, no template)", "5.000"),
        ("idle_job", "train-idle", "5.000"),
        ("never_used_codespace", "bob-dev", ""),
    ]


def test_members_may_not_see_it_and_bad_knobs_are_400(wasteful_team, bob, alice):
    member = Client()
    member.force_login(bob)
    assert member.get("/codespaces/waste/").status_code == 403
    admin = Client()
    admin.force_login(alice)
    response = admin.get("/codespaces/waste.csv?window_days=400")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["window_days"]
    assert admin.get("/codespaces/waste/?idle_percent=abc").status_code == 400


def test_the_weekly_digest_goes_to_the_team_admins(wasteful_team, alice, settings):
    alice.email = "alice@example.com"
    alice.save()
    settings.TESSERA_PORTAL_URL = "https://tessera.example.com"
    sent = send_waste_digests(NOW)
    assert "team-a" in sent
    (message,) = [m for m in mail.outbox if "team-a" in m.subject]
    assert message.to == ["alice@example.com"]
    assert message.subject == (
        "[tessera] GPU waste of team-a this week: Stopping this codespace frees 0.25 GPUs."
    )
    assert message.body.splitlines() == [
        "GPU waste of team team-a, 2026-11-13 to 2026-11-20",
        "Held 19.5 GPU-hours, idle 17 (below 5 % use).",
        "Stopping this codespace frees 0.25 GPUs.",
        "  - bob-dev (bob): 0.25 GPU",
        "Never used: bob-dev",
        "Jobs with idle GPUs: train-idle",
        "Details: https://tessera.example.com/codespaces/waste/?team=team-a",
    ]


def test_the_weekly_report_renders_for_a_demo_team():
    # the demo (manage.py seed_demo): teams, users, inventory, demo jobs and 30 days of history
    from django.core.management import call_command
    from django.template.defaultfilters import floatformat

    call_command("seed_demo", stdout=io.StringIO())
    from portal.models import Tenant

    team = Tenant.objects.get(slug="ml-research")
    report = waste_report(team, datetime.now(UTC), WastePolicy(idle_percent=5, window_days=7))
    # every idle GPU-hour is someone's and some template's (or a job's): the breakdowns add up
    assert report.allocated_gpu_hours > 0
    # (each line is rounded to the thousandth of a GPU-hour)
    by_person = sum(x.idle_gpu_hours for x in report.by_person)
    by_template = sum(x.idle_gpu_hours for x in report.by_template)
    assert by_person == pytest.approx(report.idle_gpu_hours, abs=0.001 * len(report.by_person))
    assert by_template == pytest.approx(report.idle_gpu_hours, abs=0.001 * len(report.by_template))

    client = Client()
    client.force_login(team.memberships.get(user__username="alice").user)
    page = client.get("/codespaces/waste/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "GPU waste of team ml-research" in html
    assert f'data-testid="idle">{floatformat(report.idle_gpu_hours, -1)}<' in html

    out = io.StringIO()
    call_command("waste_report", "--team", "ml-research", stdout=out)
    assert out.getvalue().startswith("GPU waste of team ml-research, ")


def test_a_formula_in_a_job_name_is_neutralised_in_the_waste_csv(wasteful_team, alice, settings):
    settings.TESSERA_WASTE_IDLE_PERCENT = 5.0
    Workload.objects.filter(name="train-idle").update(name="-2+3+cmd|' /C calc'!A0")
    client = Client()
    client.force_login(alice)
    with time_machine.travel(NOW, tick=False):
        text = client.get("/codespaces/waste.csv?team=team-a").content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["name"] for r in rows if r["kind"] == "idle_job"] == ["'-2+3+cmd|' /C calc'!A0"]
