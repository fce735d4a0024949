"""Headless Chromium (Debian's /usr/bin/chromium) driven by Playwright's Python package.

Never `playwright install`: the browser comes from Debian and is launched with `executable_path`. Missing
Chromium skips the test with the reason, unless TESSERA_REQUIRE_BROWSER=1 (CI), where it is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str | None:
    candidate = os.environ.get("TESSERA_CHROMIUM", "/usr/bin/chromium")
    return candidate if os.path.exists(candidate) else shutil.which("chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    path = chromium_path()
    if path is None:
        message = (
            "browser test needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
        )
        if os.environ.get("TESSERA_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make between page
    # actions are still synchronous and safe.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15000)
    tab = context.new_page()
    yield tab
    context.close()


@pytest.fixture
def login(page: Any) -> Callable[[str, str], Any]:
    """login(username, password) -> the page, logged in through the real login form."""
    from portal.tests.factories import DEFAULT_PASSWORD

    def do(username: str, password: str = DEFAULT_PASSWORD) -> Any:
        page.goto("/accounts/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        page.wait_for_selector("[data-testid=user-menu]")
        return page

    return do
