"""Browser test (Chromium): a demo user creates a 25% / 20 GiB codespace with the slice picker, sees it
running on a named node and GPU, stops it, starts it again and deletes it; a second user over quota sees
the request queue with the reason naming the quota and the numbers.

There is no worker in browser tests: Celery is eager (settings_test), so the scheduling cycle runs when a
request commits; the status sync that beat would run every few seconds is driven from the test.
"""

from __future__ import annotations

import io
import re
from typing import Any

import pytest

from codespaces.models import Codespace
from portal.demo import DEMO_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(db: Any) -> None:
    """The real demo data: users, the 24-node simulated cluster, quotas and codespace templates."""
    from django.core.management import call_command

    call_command("seed_demo", stdout=io.StringIO())


def beat_status_sync() -> None:
    """What beat does every few seconds: the simulated cluster reports the placed pods running."""
    from scheduling.services import reconcile

    reconcile.sync_status()


def wait_for_state(page: Any, state: str) -> None:
    page.wait_for_selector(f"h1 + [data-testid=state][data-state={state}]", timeout=20000)


def test_create_run_stop_start_delete_then_over_quota_user_queues(
    demo: None, login: Any, page: Any
) -> None:
    dialogs: list[str] = []

    def accept(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    login("bob", DEMO_PASSWORD)

    # the slice picker: what fits now, server-computed
    page.goto("/codespaces/new/")
    with page.expect_navigation():
        page.select_option("#id_template", "pytorch")  # the picker is recomputed for the template
    assert page.locator("#id_template").input_value() == "pytorch"
    assert page.locator("#id_quota option:checked").inner_text() == "training / ml-research"
    picker = page.inner_text("[data-testid=picker]")
    assert "Largest free slice" in picker
    assert "100% compute, 80 GiB on one GPU" in picker
    assert "starts now" in page.inner_text("[data-testid=preset-quarter-h100]")

    # a custom 25 % / 20 GiB slice, checked before creating
    page.fill("#id_name", "bob-dev")
    page.check("input[name=preset][value=custom]")
    page.select_option("#id_gpu_mode", "slice")
    page.fill("#id_gpu_percent", "25")
    page.fill("#id_gpu_memory_gib", "20")
    page.select_option("#id_gpu_model", "H100")
    page.fill("#id_cpu_cores", "4")
    page.fill("#id_memory_gib", "16")
    page.click("#check-size")
    page.wait_for_function(
        "document.getElementById('custom-result').textContent.startsWith('Starts now on h100-')"
    )
    page.click("[data-testid=create]")
    page.wait_for_selector("[data-testid=codespace-name]")
    assert page.inner_text("[data-testid=size]").startswith("25% · 20 GiB of 1 H100 GPU")

    beat_status_sync()
    wait_for_state(page, "running")  # the page polls and reloads itself
    location = page.inner_text("[data-testid=location]")
    assert re.fullmatch(r"h100-\d\d / gpu\d \(H100\)", location), location
    assert page.inner_text("[data-testid=ssh-command]") == "ssh bob@bob-dev.codespaces.example.com"
    codespace = Codespace.objects.get(name="bob-dev")
    assert location.startswith(codespace.node_name)

    # live utilization: one minute of (synthetic) telemetry, and the sparkline the page polls shows it
    from scheduling.telemetry.ingestion import ingest_minute

    ingest_minute()
    page.wait_for_selector("[data-sparkline][data-points='1']", timeout=20000)
    assert page.locator("[data-sparkline] .scatterlayer .trace").count() == 1

    # stop: the placement is released, the home kept
    page.click("[data-testid=stop]")
    wait_for_state(page, "stopped")
    assert page.inner_text("[data-testid=location]") == "—"
    assert "home volume is kept" in page.inner_text("[data-testid=timeline]")

    # start again
    page.click("[data-testid=start]")
    page.wait_for_selector("h1 + [data-testid=state]:not([data-state=stopped])")
    beat_status_sync()
    wait_for_state(page, "running")
    assert re.fullmatch(r"h100-\d\d / gpu\d \(H100\)", page.inner_text("[data-testid=location]"))

    # delete: one confirmation page that says what is lost, no browser dialog (issue 16)
    dialogs_before = len(dialogs)
    page.click("[data-testid=delete]")
    assert "home volume are deleted for good" in page.inner_text("[data-testid=impact]")
    page.click("[data-testid=confirm-button]")
    page.wait_for_url("**/codespaces/")
    assert len(dialogs) == dialogs_before
    assert "bob-dev" not in page.inner_text("#codespaces")
    assert Codespace.objects.get(name="bob-dev").state == "deleted"

    # a second user whose team may use at most 1 GPU in the training pool asks for 2 whole H100s
    from quotas.models import Quota

    Quota.objects.filter(tenant__slug="vision", group__name="training").update(
        gpu_max_gpu_milli=1000,
        gpu_min_gpu_milli=0,
        gpu_min_gpu_memory_mib=0,
        gpu_min_cpu_milli=0,
        gpu_min_memory_mib=0,
    )
    page.context.clear_cookies()
    login("carol", DEMO_PASSWORD)
    page.goto("/codespaces/new/?template=pytorch")
    # (the demo's telemetry seed already runs a few small jobs for vision in this pool)
    reason = page.inner_text("[data-testid=preset-2x-h100] [data-testid=queue-reason]")
    assert re.fullmatch(r"vision GPU side: \d+(\.\d+)? of max 1 GPU in use, request 2\.", reason)
    assert "would queue" in page.inner_text("[data-testid=preset-2x-h100]")
    page.fill("#id_name", "carol-big")
    page.check("input[name=preset][value='2x-h100']")
    page.click("[data-testid=create]")
    page.wait_for_selector("[data-testid=codespace-name]")
    assert page.locator("h1 + [data-testid=state]").get_attribute("data-state") == "queued"
    assert page.inner_text("[data-testid=pending-reason]") == reason
    assert page.inner_text("[data-testid=queue-position]") == "1"


def test_an_operator_adds_a_size_and_opens_a_template_to_one_team_then_a_developer_sees_it(
    demo: None, login: Any, page: Any
) -> None:
    login("ops", DEMO_PASSWORD)
    page.goto("/codespaces/templates/")
    page.click("[data-template=notebook] >> text=Edit")
    page.fill("#id_max_per_user", "4")
    page.check("input[name=allowed_tenants][value=ml-research]")
    row = page.locator("[data-testid=presets] tbody tr").nth(3)  # the first blank row
    row.locator("input[name$=-name]").fill("half-l40s")
    row.locator("input[name$=-label]").fill("1/2 L40S")
    row.locator("input[name$=-gpu_percent]").fill("50")
    row.locator("input[name$=-gpu_memory_gib]").fill("22")
    row.locator("input[name$=-gpu_model]").fill("L40S")
    with page.expect_navigation():
        page.click("[data-testid=save]")
    assert "Template notebook saved (version 2" in page.inner_text(".messages")
    listed = page.inner_text("[data-template=notebook]")
    assert "1/2 L40S" in listed
    assert "ml-research" in listed

    page.context.clear_cookies()  # signed out
    login("bob", DEMO_PASSWORD)  # ml-research: the new size is on his create page
    page.goto("/codespaces/new/?template=notebook")
    assert "1/2 L40S" in page.inner_text("[data-testid=preset-half-l40s]")
    page.context.clear_cookies()
    login("carol", DEMO_PASSWORD)  # vision: the notebook template is no longer offered
    page.goto("/codespaces/new/")
    assert "notebook" not in page.locator("#id_template").inner_text().lower()
