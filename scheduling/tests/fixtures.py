"""Fixtures of the scheduling app (registered in the root conftest.py, so they apply to every test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _fresh_scheduling_snapshots() -> Iterator[None]:
    """Each worker process caches an engine snapshot per quota group, keyed by the group's pk and its
    shard version, and its pool readings by inventory fingerprint. Tests roll the database back, so a
    later test can reuse the same pk and version for a different cluster: forget every cached snapshot
    and pool reading (and the cache) around each test."""
    from quotas.time_inputs import forget_fair_shares
    from scheduling.services.pool_cache import forget_pools
    from scheduling.services.snapshot import forget

    forget()
    forget_fair_shares()
    forget_pools()
    cache.clear()
    yield
    forget()
    forget_fair_shares()
    forget_pools()
