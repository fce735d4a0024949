"""Root pytest configuration: each app's fixtures and factories are registered once here, and the run ends
with what was skipped and why (tests/skip_summary.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from portal.celery import app as celery_app
from tests import celery_state
from tests.skip_summary import summarise

pytest_plugins = [
    "portal.tests.fixtures",
    "quotas.tests.fixtures",
    "scheduling.tests.fixtures",
    "scheduling.telemetry.tests.fixtures",
    "codespaces.tests.fixtures",
    "tests.integration.fixtures",
    "tests.integration.embedded",
    "tests.browser.fixtures",
    "tests.sso_fixtures",
]


@pytest.fixture(autouse=True)
def _celery_left_usable() -> Iterator[None]:
    """Fail the test that leaves this process' Celery app unable to send (its broker pools closed) or
    its settings changed: otherwise a later test fails for it, only in a full run (tests/celery_state.py)."""
    before = celery_state.conf_values()
    yield
    left = celery_state.problems(before)
    if left:
        celery_app.conf.update(**before)  # the next test starts from a usable app
        celery_state.reset_connections()
        pytest.fail("this test left Celery changed for the tests after it: " + "; ".join(left))


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> Iterator[None]:
    """At the very end of the run (after pytest's own short summary): which optional parts were
    skipped, why, and how to run them."""
    yield
    reasons = [_skip_reason(r) for r in terminalreporter.stats.get("skipped", [])]
    terminalreporter.section("optional parts")
    for line in summarise(reasons, database_vendor=connection.vendor):
        terminalreporter.write_line(line)
