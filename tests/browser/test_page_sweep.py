"""The page sweep: each persona (developer, team admin, operator, anonymous) visits every page of the URL
conf (tests/pages.py, real ids from the demo data) in Chromium at 1440×900 and 390×844, and every page

* has no horizontal overflow (document.scrollingElement.scrollWidth <= innerWidth),
* logs no console error and throws no script error,
* asks no other host for anything (air-gapped),
* shows its key numbers (a dashboard's figures filled in; a digit in the page's main content),
* shows no milli or MiB.

Each page is written as a screenshot to $TESSERA_SCREENSHOT_DIR (default build/screenshots/, git-ignored)
for a person to review. Problems are collected over the whole sweep and reported together.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from portal.demo import DEMO_PASSWORD
from tests.pages import PERSONAS, PUBLIC_PAGES, page_urls, raw_units, seed_demo

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Pages whose purpose is numbers (capacity, use, cost): their main content must show at least one. Forms and
# sign-in pages are not on the list; dashboards are checked figure by figure ([data-summary]).
NUMBER_PAGES = frozenset(
    {
        "quotas:index", "quotas:group", "quotas:quota", "quotas:quota-edit", "codespaces:list",
        "codespaces:detail", "codespaces:create", "codespaces:savings", "scheduling:cluster",
        "scheduling:node", "scheduling:jobs", "scheduling:job", "scheduling:workload",
    }
)  # fmt: skip
VIEWPORTS = {"desktop": (1440, 900), "phone": (390, 844)}
SCREENSHOT_DIR = Path(os.environ.get("TESSERA_SCREENSHOT_DIR", "build/screenshots"))


def _slug(url: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", url.lower()).strip("-") or "home"


def _sign_in(page: Any, username: str) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", DEMO_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=user-menu]")


def _visit(page: Any, name: str, url: str, seen: dict[str, list[str]]) -> list[str]:
    """Open `url`, wait for its data, and return what is wrong with it."""
    seen["console"].clear()
    seen["hosts"].clear()
    response = page.goto(url, wait_until="networkidle")
    status = response.status if response else 0
    problems = []
    if status not in (200, 403, 404):
        return [f"answered {status}"]
    if status == 200 and page.locator("[data-dashboard]").count():
        page.wait_for_selector("[data-dashboard][data-loaded=true]", timeout=20000)
        empty = page.eval_on_selector_all(
            "[data-summary]",
            "els => els.filter(e => !/[0-9]/.test(e.textContent)).map(e => e.dataset.summary)",
        )
        if empty:
            problems.append(f"key numbers missing: {sorted(set(empty))}")
    main = page.inner_text("main")
    if status == 200 and name in NUMBER_PAGES and not re.search(r"[0-9]", main):
        problems.append("no number in the page's main content")
    overflow = page.evaluate("() => [document.scrollingElement.scrollWidth, window.innerWidth]")
    if overflow[0] > overflow[1]:
        problems.append(f"horizontal overflow: {overflow[0]} px wide in {overflow[1]} px")
    # A page the persona may not see answers 403/404 on purpose; Chromium logs that status as an error.
    errors = [
        e for e in seen["console"] if not (status in (403, 404) and "status of " + str(status) in e)
    ]
    if errors:
        problems.append(f"console errors: {errors[:3]}")
    if seen["hosts"]:
        problems.append(f"requests to other hosts: {sorted(seen['hosts'])}")
    shown = raw_units(page.inner_text("body"))
    if shown:
        problems.append(f"shows raw units: {shown[:3]}")
    return problems


@pytest.mark.parametrize("persona", [*PERSONAS, "anonymous"])
def test_every_page_fits_a_phone_and_a_desktop_with_no_errors(
    persona: str, browser: Any, live_server: Any, settings: Any
) -> None:
    settings.TESSERA_BACKEND = "simulated"
    settings.TESSERA_SIM_INVENTORY = "demo"
    users = seed_demo()
    user = users.get(persona)
    urls = page_urls(user) if user else [(n, u) for n, u in page_urls(None) if n in PUBLIC_PAGES]
    assert urls, "nothing to visit"
    host = urlsplit(live_server.url).netloc
    problems: list[str] = []
    for label, (width, height) in VIEWPORTS.items():
        context = browser.new_context(
            base_url=live_server.url, viewport={"width": width, "height": height}
        )
        context.set_default_timeout(20000)
        page = context.new_page()
        seen: dict[str, list[str]] = {"console": [], "hosts": []}
        page.on(
            "console",
            lambda m, seen=seen: seen["console"].append(m.text) if m.type == "error" else None,
        )
        page.on("pageerror", lambda e, seen=seen: seen["console"].append(f"script error: {e}"))
        page.on(
            "request",
            lambda r, seen=seen: (
                seen["hosts"].append(urlsplit(r.url).netloc)
                if urlsplit(r.url).scheme in ("http", "https", "ws", "wss")
                and urlsplit(r.url).netloc != host
                else None
            ),
        )
        if user:
            _sign_in(page, user.username)
        folder = SCREENSHOT_DIR / persona.replace(" ", "-") / f"{label}-{width}x{height}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, url in urls:
            found = _visit(page, name, url, seen)
            page.screenshot(path=str(folder / f"{_slug(url)}.png"), full_page=True)
            problems += [f"{persona} {label} {url}: {p}" for p in found]
        context.close()
    (SCREENSHOT_DIR / persona.replace(" ", "-") / "problems.txt").write_text(
        "\n".join(problems) + "\n"
    )
    assert not problems, "\n".join(problems)
