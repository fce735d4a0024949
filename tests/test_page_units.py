"""No page or form shows a person milli or MiB: every page of the URL conf (tests/pages.py), as each
persona of the demo data and anonymously, rendered with Django's client; its visible text (text nodes,
titles, labels, placeholders) is searched for raw units."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.pages import (
    PUBLIC_PAGES,
    page_urls,
    pages,
    raw_units,
    seed_demo,
    title_problems,
    visible_text,
)

pytestmark = pytest.mark.django_db


def test_no_page_shows_milli_or_mib_to_any_persona(settings) -> None:
    settings.TESSERA_BACKEND = "simulated"
    settings.TESSERA_SIM_INVENTORY = "demo"
    users = seed_demo()
    found: list[str] = []
    visited = 0
    for persona, user in users.items():
        client = Client()
        client.force_login(user)
        for _name, url in page_urls(user):
            response = client.get(url)
            assert response.status_code in (200, 403, 404), (
                f"{persona} {url}: {response.status_code}"
            )
            if "text/html" not in response["Content-Type"]:
                continue
            visited += 1
            found += [
                f"{persona} {url}: {line!r}"
                for line in raw_units(visible_text(response.content.decode()))
            ]
    anonymous = Client()
    for name, url in page_urls(None):
        if name in PUBLIC_PAGES:
            response = anonymous.get(url)
            found += [
                f"anonymous {url}: {line!r}"
                for line in raw_units(visible_text(response.content.decode()))
            ]
    assert visited >= 3 * 25, f"only {visited} pages rendered: is the enumeration broken?"
    assert found == []


def test_every_page_has_one_title_of_plain_text_for_every_persona(settings) -> None:
    settings.TESSERA_BACKEND = "simulated"
    settings.TESSERA_SIM_INVENTORY = "demo"
    users = seed_demo()
    found: list[str] = []
    visited = 0
    visitors = [(persona, user, page_urls(user)) for persona, user in users.items()]
    visitors.append(("anonymous", None, [p for p in page_urls(None) if p[0] in PUBLIC_PAGES]))
    for persona, user, urls in visitors:
        client = Client()
        if user is not None:
            client.force_login(user)
        for _name, url in urls:
            response = client.get(url)
            if "text/html" not in response.get("Content-Type", ""):
                continue
            visited += 1
            found += [f"{persona} {url}: {p}" for p in title_problems(response.content.decode())]
    assert visited >= 3 * 25, f"only {visited} pages rendered: is the enumeration broken?"
    assert found == []


@pytest.mark.parametrize(
    ("html", "problems"),
    [
        ("<html><head><title>Node n1 · Tessera</title></head></html>", []),
        ("<title>a</title><title>b</title>", ["2 <title> elements"]),
        ("<p>no title</p>", ["0 <title> elements"]),
        ('<title>Node n1<section class="card"><h2>x</h2></section></title>',
         ["tags inside <title>: <section> <h2> </h2> </section>"]),
        ("<title>a &lt;b&gt; c</title>", ["markup in the title 'a <b> c'"]),
    ],
)  # fmt: skip
def test_title_problems_finds_missing_repeated_and_marked_up_titles(
    html: str, problems: list[str]
) -> None:
    assert title_problems(html) == problems


def test_the_sweep_covers_the_pages_of_every_app() -> None:
    routes = {p.route for p in pages()}
    for route in ("", "quotas/", "quotas/groups/<int:pk>/edit/", "codespaces/new/", "cluster/",
                  "cluster/nodes/<int:node_id>/", "cluster/jobs/<int:job_id>/", "dashboards/chargeback/",
                  "account/tokens/", "accounts/login/"):  # fmt: skip
        assert route in routes
    assert not any(r.endswith(("data/", ".json", ".csv")) or r.startswith("^api") for r in routes)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("CPU: 4000 milli", True),
        ("16384 MiB", True),
        ("250m CPU", True),
        ("2.5 GPUs · 16 GiB · 4 cores", False),
        ("started 5m ago", False),
        ("a 30 % slice of one GPU", False),
    ],
)
def test_raw_units_finds_milli_and_mib_only(text: str, shown: bool) -> None:
    assert bool(raw_units(text)) is shown
