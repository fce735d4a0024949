"""Test isolation for the codespaces tests.

scheduling keeps a per-process engine snapshot per quota group, keyed by the group's pk and its shard
version. Between tests the database is rolled back, so a later test can reuse the same pk and version
for a different cluster and read a stale snapshot; forget them (and the cache) before each test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _fresh_scheduling_snapshots() -> Iterator[None]:
    from scheduling.services.snapshot import forget

    forget()
    cache.clear()
    yield
    forget()
