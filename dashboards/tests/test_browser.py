"""Every dashboard page draws its charts with data in Chromium (the plots hold points), and the controls
re-query the JSON endpoint."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Workload
from scheduling.telemetry.ingestion import ingest_minute
from scheduling.telemetry.tests.fixtures import FIXED, FixedMetrics

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# page → the data-figure names it must draw with points
PAGES = {
    "/dashboards/": ["allocation", "pending", "waits"],
    "/dashboards/tenants/": ["quota", "utilization", "wasting"],
    "/dashboards/fragmentation/": ["fits", "compute", "memory"],
    "/dashboards/savings/": ["savings"],
    "/dashboards/chargeback/": ["chargeback"],
}

POINTS = """(names) => names.every((name) => {
  const el = document.querySelector('[data-figure="' + name + '"]');
  if (!el || !el.classList.contains('js-plotly-plot') || !el.data || !el.data.length) { return false; }
  return el.data.some((t) => ((t.type === 'heatmap' ? t.z : t.y) || []).some((v) => v !== null && (Array.isArray(v) ? v.some((c) => c !== null) : true)));
})"""


@pytest.fixture
def live_data(telemetry_cluster):  # type: ignore[no-untyped-def]
    now = timezone.now()
    # waits happened just now (the fixture dates them around its own T0)
    for name, submitted, placed in (("cs-busy", 3, 2), ("half", 30, 28), ("train", 10, 5)):
        Workload.objects.filter(pk=telemetry_cluster.workloads[name].pk).update(
            submitted_at=now - timedelta(minutes=submitted),
            placed_at=now - timedelta(minutes=placed),
        )
    for minute in (2, 1, 0):
        ingest_minute(now - timedelta(minutes=minute), FixedMetrics(FIXED))
    return telemetry_cluster


@pytest.mark.parametrize("url", list(PAGES))
def test_dashboard_page_draws_its_charts_with_data(login, operator, live_data, url):
    page = login("operator")
    page.goto(url)
    page.wait_for_selector("[data-dashboard][data-loaded=true]")
    page.wait_for_function(POINTS, arg=PAGES[url])
    first = page.evaluate(
        "() => document.querySelector('.js-plotly-plot').data[0][document.querySelector('.js-plotly-plot').data[0].type === 'heatmap' ? 'z' : 'y'].length"
    )
    assert first > 0
    assert "Fragmentation = free GPU capacity" in page.inner_text(".definitions")
    assert page.inner_text("[data-status]").startswith("Updated")


def test_member_changes_range_and_sees_her_tenant_figures(login, bob, live_data):
    page = login("bob")
    page.goto("/dashboards/tenants/")
    page.wait_for_selector("[data-dashboard][data-loaded=true]")
    assert page.inner_text('[data-summary="utilization"]') == "45.5"
    assert page.locator("#id_tenant option").all_inner_texts() == ["Team A (team-a)"]
    with page.expect_response(
        lambda r: "/dashboards/tenants/data/?tenant=team-a&range=7d" in r.url
    ):
        page.select_option("#id_range", "7d")
    page.wait_for_function(POINTS, arg=["quota"])
    assert "range=7d" in page.url
    assert page.inner_text("table[data-table=wasting] tbody").startswith("cs-idle")


def test_bad_custom_slice_shows_the_error_next_to_the_field(login, operator, live_data):
    page = login("operator")
    page.goto("/dashboards/fragmentation/")
    page.wait_for_selector("[data-dashboard][data-loaded=true]")
    page.fill("#id_gpu_percent", "500")
    page.dispatch_event("#id_gpu_percent", "change")
    page.wait_for_function(
        "() => document.querySelector('[data-field-error=gpu_percent]').textContent"
        " === 'Enter between 0.1 and 100 %.'"
    )
    assert page.inner_text('[data-summary="fits_total"]') == "4"
