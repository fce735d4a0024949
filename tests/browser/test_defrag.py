"""Browser (Chromium), issue 21: the operator previews a defragmentation plan on the fragmentation page,
applies it, the blocked 8-GPU job starts, and the owner of the moved codespace reads why it moved.

Celery is eager in tests (settings_test): cycles and the codespace observer run when a request commits;
the status sync that beat would run is driven from the test."""

from __future__ import annotations

from typing import Any

import pytest

from portal.tests.factories import DEFAULT_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_defragments_the_pool_the_8_gpu_job_starts_and_the_owner_reads_why(
    browser: Any, live_server: Any, login: Any, operator: Any, bob: Any, team_a: Any, settings: Any
) -> None:
    from codespaces.models import Codespace
    from codespaces.tests.defrag_scenario import codespace_blocking_a_node, settle
    from scheduling.choices import WorkloadState
    from scheduling.models import Workload

    settings.TESSERA_DEFRAG_MIN_RUNTIME_SECONDS = 0
    # given bob's codespace (he agreed to moves) on one H100 node, a job on the other, and an 8-GPU
    # job waiting although 14 GPUs are free
    scene = codespace_blocking_a_node(bob, team_a, consent=True)
    assert scene.waiting.state == WorkloadState.PENDING
    assert scene.codespace.node_name == "training-g0"

    # when the operator previews a plan on the fragmentation page
    page = login("operator")
    page.goto("/dashboards/fragmentation/?pool=training")
    page.click("[data-testid=defrag-preview]")
    page.wait_for_selector("[data-testid=defrag-plan]")

    # then it shows the one move, its cost and what it frees, and nothing has moved yet
    value = page.inner_text("[data-testid=defrag-value]")
    assert value.startswith("1 move frees 1 whole H100 node")
    assert f"the waiting 8-GPU job {team_a.slug}/big can start" in value
    assert page.inner_text("[data-testid=defrag-state]") == "Previewed"
    assert page.inner_text("[data-testid=defrag-cost]") == "2 min"
    moves = page.inner_text("[data-testid=defrag-moves]")
    assert "codespace bob-dev" in moves
    assert "training-g0 GPU" in moves
    assert "training-g1 GPU" in moves
    assert Workload.objects.get(pk=scene.waiting.pk).state == WorkloadState.PENDING

    # when they apply it
    page.click("[data-testid=defrag-apply]")
    assert "What will happen: 1 workload moves (restarts)" in page.inner_text(
        "[data-testid=impact]"
    )
    page.click("[data-testid=confirm-button]")
    page.wait_for_selector("[data-testid=defrag-state]:has-text('Applied')")
    assert page.locator("[data-testid=defrag-apply]").count() == 0
    settle()
    settle()

    # then the blocked 8-GPU job runs on the node the move freed
    waiting = Workload.objects.get(pk=scene.waiting.pk)
    assert waiting.state == WorkloadState.RUNNING
    assert waiting.placements.get(released_at__isnull=True).node.name == "training-g0"

    # and bob reads in his codespace's timeline why it moved, and where it runs now
    context = browser.new_context(base_url=live_server.url, viewport={"width": 390, "height": 844})
    try:
        dev = context.new_page()
        dev.goto("/accounts/login/")
        dev.fill("#id_username", "bob")
        dev.fill("#id_password", DEFAULT_PASSWORD)
        dev.click("button[type=submit]")
        dev.wait_for_selector("[data-testid=user-menu]")
        dev.goto(f"/codespaces/{Codespace.objects.get(name='bob-dev').pk}/")
        timeline = dev.inner_text("[data-testid=timeline]")
        assert (
            "Moved to free 1 H100 GPU on training-g0 for a waiting 8-GPU job "
            f"{team_a.slug}/big (defragmentation); restarted on training-g1." in timeline
        )
        assert "the home volume is kept" in timeline
        assert "Moved from training-g0 to training-g1 by defragmentation plan" in timeline
        assert dev.inner_text("[data-testid=location]").startswith("training-g1")
    finally:
        context.close()
