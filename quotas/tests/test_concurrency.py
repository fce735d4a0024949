"""Real concurrent writers (threads, own connections) on PostgreSQL: the group and quota row locks plus the
version compare-and-set let exactly one of two racing edits through."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections

from portal.errors import DomainError
from quotas import services
from quotas.models import Quota, QuotaChange
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="row locks need PostgreSQL (DATABASE_URL)"
    ),
]


def race(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls at the same moment in threads; return each result or the DomainError raised."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(index: int, call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[index] = call()
        except DomainError as error:
            results[index] = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def test_two_updates_with_the_same_version_one_wins(team_a):
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=8)
    quota = QuotaFactory(group=group, tenant=team_a, gpu_max_gpu_milli=4000)
    results = race(
        lambda: services.update_quota(quota.pk, expected_version=1, gpu_max_gpu_milli=5000),
        lambda: services.update_quota(quota.pk, expected_version=1, gpu_max_gpu_milli=6000),
    )
    codes = sorted(getattr(r, "code", "saved") for r in results)
    assert codes == ["precondition_failed", "saved"]
    saved = Quota.objects.get(pk=quota.pk)
    assert saved.version == 2
    assert QuotaChange.objects.filter(action="updated").count() == 1


def test_two_sibling_mins_that_only_fit_alone_one_is_refused(team_a, team_b):
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=8)
    results = race(
        lambda: services.create_quota(
            group=group, tenant=team_a, gpu_min_gpu_milli=5000, gpu_max_gpu_milli=8000
        ),
        lambda: services.create_quota(
            group=group, tenant=team_b, gpu_min_gpu_milli=5000, gpu_max_gpu_milli=8000
        ),
    )
    codes = sorted(getattr(r, "code", "saved") for r in results)
    assert codes == ["invalid", "saved"]
    assert Quota.objects.count() == 1
