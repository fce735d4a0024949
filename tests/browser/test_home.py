"""Browser: the home page's persona status fits a phone (390 px) and a desktop, with its numbers."""

from __future__ import annotations

import os
from typing import Any

import pytest

from codespaces import services as codespace_services
from portal.tests.factories import DEFAULT_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def no_horizontal_overflow(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


@pytest.mark.parametrize(
    ("_case", "width", "height"), [("phone", 390, 844), ("desktop", 1440, 900)]
)
def test_home_page_shows_each_persona_its_status_without_overflow(
    browser: Any,
    live_server: Any,
    bob: Any,
    alice: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    settings: Any,
    _case: str,
    width: int,
    height: int,
) -> None:
    # given bob's codespace on a quarter H100 (4.00 per GPU-hour) in team-a, whose admin is alice
    settings.TESSERA_GPU_HOUR_PRICES = "H100=4.0,default=1.0"
    codespace_services.create_codespace(
        user=bob, tenant=team_a, template=template, name="bob-dev", preset="quarter-h100"
    )
    alice.is_staff = True  # alice is also an operator: every part of the page at once
    alice.save(update_fields=["is_staff"])
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": width, "height": height}
    )
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("#id_username", "bob")
    page.fill("#id_password", DEFAULT_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=my-codespaces]")
    # then bob sees his codespace's cost and what he can start, and the page fits the screen
    assert page.inner_text("[data-testid=running-cost]").startswith("Holding GPUs now costs 1.00")
    assert "up to 0.75 GPUs" in page.inner_text("[data-testid=start-now]")
    assert no_horizontal_overflow(page)
    shots = os.environ.get("TESSERA_SCREENSHOT_DIR")
    if shots:
        page.screenshot(path=f"{shots}/home-developer-{width}.png", full_page=True)
    context.clear_cookies()
    page.goto("/accounts/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", DEFAULT_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=operator-status]")
    assert "0.25 GPUs allocated of 3 GPUs" in page.inner_text("[data-testid=cluster-allocation]")
    assert "0.25 GPUs" in page.inner_text("[data-testid=team-team-a]")
    assert no_horizontal_overflow(page)
    if shots:
        page.screenshot(path=f"{shots}/home-operator-{width}.png", full_page=True)
    context.close()
