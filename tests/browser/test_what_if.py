"""Browser (Chromium), issue 20: an operator runs the what-if planner on 30 days of recorded demand with
one more node of the pool's model and sees both runs side by side, with their plots."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from scheduling.tests.factories import make_group, make_quota, small_cluster
from scheduling.tests.test_demand import record

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_adds_a_node_in_the_what_if_planner_and_sees_both_runs_plotted(
    login: Any, operator: Any, team_a: Any
) -> None:
    # given one A100 and, over the last 30 days, three pods a day that queued behind each other
    small_cluster(gpu_nodes=1, gpus_per_node=1)
    quota = make_quota(make_group(), team_a)
    for day in range(1, 31):
        t0 = timezone.now() - timedelta(days=day) + timedelta(hours=1)
        s = lambda seconds, t0=t0: t0 + timedelta(seconds=seconds)  # noqa: E731
        record(quota, f"a{day}", s(0), s(0), s(100))
        record(quota, f"b{day}", s(10), s(100), s(150))
        record(quota, f"c{day}", s(20), s(150), s(200))
    page = login("operator")

    # when the operator asks what one more A100 node would have done
    page.goto("/cluster/what-if/")
    page.select_option("#id_group", str(quota.group_id))
    page.fill("#id_days", "30")
    page.select_option("#id_add_model", "A100")
    page.fill("#id_add_count", "1")
    page.click("[data-testid=run-what-if]")

    # then both runs are side by side: the same 90 requests, one GPU against two, shorter waits
    page.wait_for_selector("[data-testid=what-if-results]")
    assert "90 recorded requests of the last 30 days" in page.inner_text(
        "[data-testid=what-if-results]"
    )
    assert page.inner_text("[data-testid=gpus-0]") == "1 node, 1 GPU"
    assert page.inner_text("[data-testid=gpus-1]") == "2 nodes, 2 GPUs"
    assert page.inner_text("[data-testid=waits-0]") == "1.5 min / 2.2 min / 2.2 min"
    assert page.inner_text("[data-testid=waits-1]") == "0 s / 40 s / 40 s"
    assert (
        page.inner_text("[data-testid=never-0]") == page.inner_text("[data-testid=never-1]") == "0"
    )

    # and both plots are drawn, each with one line per run
    for chart in ("chart-allocation", "chart-queue"):
        page.wait_for_selector(f"[data-testid={chart}] .main-svg")
        assert page.locator(f"[data-testid={chart}] .scatterlayer .trace").count() == 2
        legend = page.locator(f"[data-testid={chart}] .legend").text_content() or ""
        assert "as it is" in legend
        assert "with the change" in legend
