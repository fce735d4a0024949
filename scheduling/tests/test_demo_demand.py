"""The demo records demand the what-if planner can replay (issue 38 #15: on the demo the planner showed
"13 requests, 0 % allocation"), and the planner's form offers the known GPU models and teams."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from portal import demo as portal_demo
from quotas import demo as quotas_demo
from quotas.models import QuotaGroup
from scheduling import demo as scheduling_demo
from scheduling.forms import WhatIfForm
from scheduling.models import Workload
from scheduling.services.whatif import WhatIfChange, run_whatif

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings: Any) -> None:
    settings.TESSERA_BACKEND = "simulated"
    settings.TESSERA_SIM_INVENTORY = "demo"
    for module in (portal_demo, scheduling_demo, quotas_demo):
        module.seed(io.StringIO())
    scheduling_demo.seed_demand_history(io.StringIO())


@pytest.mark.parametrize("pool", ["training", "interactive"])
def test_the_demo_demand_gives_the_what_if_planner_a_month_to_replay(demo: None, pool: str) -> None:
    group = QuotaGroup.objects.get(name=pool)
    report = run_whatif(group, 30, WhatIfChange())
    assert report.requests >= 300
    assert 25 <= report.baseline.summary.allocation_pct <= 90
    assert report.baseline.summary.never_started == 0
    # every team of the pool asked for something
    assert set(report.baseline.team_waits_p95) == set(
        group.quotas.values_list("tenant__slug", flat=True)
    )


def test_on_the_demo_a_smaller_pool_makes_work_wait_longer(demo: None) -> None:
    group = QuotaGroup.objects.get(name="training")
    report = run_whatif(group, 30, WhatIfChange(remove_model="A100", remove_count=4))
    assert report.changed.gpus == report.baseline.gpus - 32
    assert report.changed.summary.waits.p95 > report.baseline.summary.waits.p95
    assert report.changed.summary.allocation_pct > report.baseline.summary.allocation_pct


def test_seeding_the_demand_again_adds_nothing(demo: None) -> None:
    count = Workload.objects.count()
    scheduling_demo.seed_demand_history(io.StringIO())
    assert Workload.objects.count() == count


def test_seed_demo_records_the_demand_history_once(settings: Any) -> None:
    settings.TESSERA_BACKEND = "simulated"
    settings.TESSERA_SIM_INVENTORY = "demo"
    call_command("seed_demo", stdout=io.StringIO())
    history = Workload.objects.filter(name__startswith=scheduling_demo.HISTORY_PREFIX).count()
    assert history >= 600
    call_command("seed_demo", stdout=io.StringIO())
    assert (
        Workload.objects.filter(name__startswith=scheduling_demo.HISTORY_PREFIX).count() == history
    )


def test_the_form_offers_the_known_gpu_models_and_a_cap_per_team(demo: None) -> None:
    form = WhatIfForm()
    models = ["A100", "H100", "L40S", "T4"]
    assert [value for value, _ in form.fields["add_model"].choices] == ["", *models]  # type: ignore[attr-defined]
    assert [value for value, _ in form.fields["remove_model"].choices] == ["", *models]  # type: ignore[attr-defined]
    caps = [name for name in form.fields if name.startswith("team_gpus_")]
    assert caps == ["team_gpus_inference", "team_gpus_ml-research", "team_gpus_vision"]
    group = QuotaGroup.objects.get(name="training")
    bound = WhatIfForm(
        {"group": group.pk, "days": 30, "add_count": 0, "remove_count": 0, "team_gpus_vision": "4"}
    )
    assert bound.is_valid(), bound.errors
    assert bound.cleaned_data["team_gpus"] == {"vision": 4}
    unknown = WhatIfForm(
        {"group": group.pk, "days": 30, "add_model": "B200", "add_count": 1, "remove_count": 0}
    )
    assert unknown.errors["add_model"] == ["One of: A100, H100, L40S, T4."]
    negative = WhatIfForm(
        {"group": group.pk, "days": 30, "add_count": 0, "remove_count": 0, "team_gpus_vision": "-1"}
    )
    assert "team_gpus_vision" in negative.errors


def test_the_what_if_page_on_the_demo_shows_allocation_and_selects(demo: None) -> None:
    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.get(username="ops"))
    group = QuotaGroup.objects.get(name="interactive")
    page = client.get(
        f"/cluster/what-if/?group={group.pk}&days=30&add_model=L40S&add_count=2&remove_count=0"
    ).content.decode()
    assert '<select name="add_model"' in page
    assert '<option value="L40S" selected>L40S</option>' in page
    assert 'name="team_gpus_vision"' in page
    assert '<td data-testid="allocation-0">0.0 %</td>' not in page
    assert 'data-testid="allocation-0"' in page
