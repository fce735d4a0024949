"""Every page of the portal, enumerated from the URL conf, with real ids from the demo data: what the page
sweeps (tests/test_page_units.py with Django's client, tests/browser/test_page_sweep.py in Chromium) visit.

A page is a GET route that answers HTML. Routes are found by walking the URL conf, so a page added later is
swept without touching this file; a new route with a parameter fails `page_urls` until ID_FOR says where to
find a real id for it (or NOT_PAGES says why it is not a page).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver

from codespaces.models import Codespace, CodespaceTemplate
from portal.scoping import scope_queryset
from quotas.models import Quota, QuotaGroup
from scheduling.models import Gang, Node, Workload
from scheduling.services import submit_gang

# Personas of the demo data (portal/demo.py): who visits, as which role.
PERSONAS = {
    "developer": "bob",  # member of ml-research
    "team admin": "alice",  # tenant admin of ml-research
    "operator": "ops",  # platform operator
}
PUBLIC_PAGES = ("login", "api-root")

# Route prefixes and names that are not pages a person reads: the API (its docs are checked on their own),
# Django's admin, JSON / CSV / text endpoints that pages poll, and POST-only actions.
NOT_PAGES = re.compile(
    r"^(\^api|admin/|metrics$|healthz$|favicon\.ico$)"  # /healthz: a monitor's plain answer
    r"|(data/|\.json|\.csv|what-if/)$"
    r"|/(revoke|start|stop|delete|keep|cancel|fairness|apply|move-consent)/$"  # POST-only actions
    r"|^dashboards/fragmentation/defrag/$"  # POST-only: preview a defragmentation plan
    r"|<str:action>/$"
    r"|^(accounts/logout/|tenant/switch/)$"
    r"|^accounts/sso/"  # redirects to and from the identity provider (404 while single sign-on is off)
    r"|selector-preview/$"  # the quota-group builder's JSON preview
)

# Which real row fills a route's id, for the user who visits (None: the persona has no such row).
IdFinder = Callable[[Any], "int | None"]


def _first(queryset: Any) -> int | None:
    row = queryset.order_by("pk").first()
    return None if row is None else row.pk


def _mine(model: Any) -> IdFinder:
    return lambda user: _first(scope_queryset(model.objects.all(), user))


def _codespace(user: Any) -> int | None:
    return _first(Codespace.objects.filter(owner=user)) or _first(
        scope_queryset(Codespace.objects.all(), user)
    )


ID_FOR: dict[str, IdFinder] = {
    "quotas:group": lambda user: _first(QuotaGroup.objects.all()),
    "quotas:group-edit": lambda user: _first(QuotaGroup.objects.all()),
    "quotas:quota-create": lambda user: _first(QuotaGroup.objects.all()),
    "quotas:quota": _mine(Quota),
    "quotas:quota-edit": _mine(Quota),
    "codespaces:detail": _codespace,
    "codespaces:template-edit": lambda user: _first(CodespaceTemplate.objects.all()),
    "scheduling:node": lambda user: _first(Node.objects.exclude(gpus=None)),
    "scheduling:job": _mine(Gang),
    "scheduling:workload": _mine(Workload),
}
_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


@dataclass(frozen=True)
class Page:
    name: str
    route: str

    def url(self, user: Any) -> str | None:
        """The path with real ids for `user`, or None when the demo has no row of the kind for them."""
        if not _PARAMETER.search(self.route):
            return "/" + self.route
        finder = ID_FOR.get(self.name)
        if finder is None:
            raise LookupError(
                f"page {self.name!r} ({self.route}) takes a parameter: add to tests.pages.ID_FOR "
                "how to find a real id in the demo data, or to NOT_PAGES why it is not a page"
            )
        pk = finder(user)
        return None if pk is None else "/" + _PARAMETER.sub(str(pk), self.route)


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[Page]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = namespace + (f"{pattern.namespace}:" if pattern.namespace else "")
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern):
            yield Page(namespace + (pattern.name or ""), prefix + str(pattern.pattern))


def pages() -> list[Page]:
    """Every GET page of the URL conf (NOT_PAGES left out), in URL-conf order."""
    return [p for p in _walk(get_resolver().url_patterns) if not NOT_PAGES.search(p.route)]


def page_urls(user: Any) -> list[tuple[str, str]]:
    """(page name, path with real ids) of every page, for `user`."""
    found = []
    for page in pages():
        url = page.url(user)
        if url is not None:
            found.append((page.name, url))
    return found


def seed_demo() -> dict[str, Any]:
    """The demo data `make run` loads, plus one gang job of ml-research (the demo has none), so every
    page has a real row to show. Returns the demo users by persona."""
    call_command("seed_demo", stdout=io.StringIO())
    users = {
        persona: get_user_model().objects.get(username=name) for persona, name in PERSONAS.items()
    }
    quota = Quota.objects.filter(tenant__slug="ml-research").order_by("pk").first()
    assert quota is not None
    member = {"cpu_milli": 1000, "memory_mib": 2048, "gpu_count": 0, "gpu_milli": 0}
    submit_gang(
        tenant=quota.tenant,
        quota=quota,
        name="demo-sweep-gang",
        owner=users["team admin"],
        members=[member, member],
        min_available=2,
        timeout_seconds=600,
    )
    return users


# --------------------------------------------------------------------------- what a person reads
# Units people must never be shown: milli (also "milli-GPUs", "250m" of CPU) and MiB.
RAW_UNITS = re.compile(r"\bmilli|\bMiB\b|\b\d+m\b(?! ago)")


class _VisibleText(HTMLParser):
    """Text a person sees or hears: text nodes outside <script>/<style>/<template>, plus the title,
    aria-label, placeholder and alt attributes and the values of buttons."""

    HIDDEN = frozenset({"script", "style", "template", "noscript"})
    SHOWN_ATTRIBUTES = frozenset({"title", "aria-label", "placeholder", "alt"})

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.HIDDEN:
            self._hidden += 1
        values = dict(attrs)
        for name in self.SHOWN_ATTRIBUTES:
            if values.get(name):
                self.parts.append(str(values[name]))
        if tag == "input" and values.get("type") in ("submit", "button") and values.get("value"):
            self.parts.append(str(values["value"]))

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden and data.strip():
            self.parts.append(data.strip())


def visible_text(html: str) -> str:
    parser = _VisibleText()
    parser.feed(html)
    return "\n".join(parser.parts)


def raw_units(text: str) -> list[str]:
    """The lines of `text` that show a person milli or MiB."""
    return [line for line in text.splitlines() if RAW_UNITS.search(line)]


# --------------------------------------------------------------------------- the tab's title
TAG_LIKE = re.compile(r"<[^>]*>|[<>]")


class _Titles(HTMLParser):
    """The <title> elements of a page: their text, and whether markup was parsed inside one."""

    def __init__(self) -> None:
        super().__init__()
        self.titles: list[str] = []
        self.markup_inside: list[str] = []
        self._open = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._open = True
            self.titles.append("")
        elif self._open:
            self.markup_inside.append(f"<{tag}>")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._open = False
        elif self._open:
            self.markup_inside.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self._open:
            self.titles[-1] += data


def title_problems(html: str) -> list[str]:
    """Why the page's tab title is wrong: not exactly one <title>, or markup (a tag, `<`, `>`) in it
    after HTML parsing. [] when the page has one plain-text title."""
    parser = _Titles()
    parser.feed(html)
    parser.close()
    problems = []
    if len(parser.titles) != 1:
        problems.append(f"{len(parser.titles)} <title> elements")
    if parser.markup_inside:
        problems.append(f"tags inside <title>: {' '.join(parser.markup_inside[:4])}")
    problems += [
        f"markup in the title {t.strip()[:80]!r}" for t in parser.titles if TAG_LIKE.search(t)
    ]
    return problems
