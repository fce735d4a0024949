"""The Defragment panel of the fragmentation page: operators preview a plan and apply it; members see no
panel and cannot post; bad input is a form error, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from scheduling.choices import DefragPlanState, WorkloadState
from scheduling.models import DefragPlan, Workload
from scheduling.tests.defrag_scenario import fragmented_pool, keep_both_in_place

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _open_policy(settings: Any) -> None:
    settings.TESSERA_DEFRAG_MIN_RUNTIME_SECONDS = 0


def client_for(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_operator_previews_and_applies_a_plan_from_the_fragmentation_page(
    operator: Any, team_a: Any
) -> None:
    pool = fragmented_pool(team_a)
    c = client_for(operator)
    page = c.get("/dashboards/fragmentation/?pool=training")
    assert 'data-testid="defrag-preview"' in page.content.decode()

    r = c.post("/dashboards/fragmentation/defrag/", {"pool": "training"})
    plan = DefragPlan.objects.get()
    assert r.status_code == 302
    assert r["Location"] == f"/dashboards/fragmentation/?pool=training&plan={plan.pk}#defrag"
    shown = c.get(f"/dashboards/fragmentation/?pool=training&plan={plan.pk}").content.decode()
    assert plan.value in shown
    assert plan.moves.get().reason in shown
    assert (
        "10 min</span> of restarts" in shown
    )  # one job restart (TESSERA_DEFRAG_JOB_RESTART_SECONDS)
    assert 'data-testid="defrag-apply"' in shown

    # issue 38: Apply asks first, like the other destructive operator actions, and moves nothing yet
    confirm = c.get(f"/dashboards/fragmentation/defrag/{plan.pk}/apply/")
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert 'data-testid="confirm-button"' in html
    assert f"What will happen:</strong> 1 workload moves (restarts): {plan.value}" in html
    plan.refresh_from_db()
    assert plan.state == DefragPlanState.PREVIEWED

    r = c.post(f"/dashboards/fragmentation/defrag/{plan.pk}/apply/")
    assert r.status_code == 302
    plan.refresh_from_db()
    assert plan.state == DefragPlanState.APPLIED
    assert Workload.objects.get(pk=pool.waiting.pk).state == WorkloadState.PLACED
    after = c.get(r["Location"]).content.decode()
    assert 'data-testid="defrag-apply"' not in after
    assert f"Plan {plan.pk} applied" in after


def test_members_see_no_panel_and_cannot_post(alice: Any, team_a: Any) -> None:
    fragmented_pool(team_a)
    c = client_for(alice)
    assert 'data-testid="defrag-panel"' not in c.get("/dashboards/fragmentation/").content.decode()
    assert c.post("/dashboards/fragmentation/defrag/", {"pool": "training"}).status_code == 403
    assert DefragPlan.objects.count() == 0


@pytest.mark.parametrize("pool", ["", "nope", "x" * 300])
def test_a_bad_pool_is_a_form_error_and_plans_nothing(operator: Any, pool: str) -> None:
    c = client_for(operator)
    r = c.post("/dashboards/fragmentation/defrag/", {"pool": pool}, follow=True)
    assert r.status_code == 200
    assert "Defragment: " in r.content.decode()
    assert DefragPlan.objects.count() == 0


def test_applying_an_unknown_plan_says_so(operator: Any) -> None:
    r = client_for(operator).post("/dashboards/fragmentation/defrag/987654/apply/", follow=True)
    assert r.status_code == 200
    assert "Defragmentation plan 987654 does not exist." in r.content.decode()


def test_an_empty_plan_shows_what_it_looked_at_and_why_the_work_stayed(
    operator: Any, team_a: Any
) -> None:
    pool = fragmented_pool(team_a)
    keep_both_in_place(pool)
    c = client_for(operator)
    r = c.post("/dashboards/fragmentation/defrag/", {"pool": "training"})
    shown = c.get(r["Location"]).content.decode()
    assert "No move helps" in shown
    assert "Looked at 1 waiting request and 2 running workloads; none may move." in shown
    assert "It is not preemptible: 1 workload" in shown
    assert "It is exempt from defragmentation: 1 workload" in shown
    assert 'data-testid="defrag-apply"' not in shown


def test_a_plan_lists_what_the_planner_refused(operator: Any, team_a: Any, settings: Any) -> None:
    fragmented_pool(team_a)
    settings.TESSERA_DEFRAG_MAX_COST_SECONDS_PER_MOVE = 0
    c = client_for(operator)
    shown = c.get(
        c.post("/dashboards/fragmentation/defrag/", {"pool": "training"})["Location"]
    ).content.decode()
    assert "What held the planner back:" in shown
    assert (
        "Clearing a node needed more moves, moves per owner or cost than the limits allow (2×)"
        in shown
    )
