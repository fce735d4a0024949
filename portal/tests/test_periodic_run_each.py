"""portal.periodic.run_each: one bad row is logged, counted and rolled back; the others still run."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from portal.models import Tenant
from portal.periodic import ItemFailures, run_each
from portal.tests.factories import TenantFactory


@pytest.mark.django_db
def test_a_row_that_raises_is_logged_counted_and_rolled_back_and_the_others_run(
    caplog: Any,
) -> None:
    # given three tenants, the second of which makes the work raise after writing
    tenants = [TenantFactory(slug=f"t{i}", name=f"T{i}") for i in range(3)]

    def rename(tenant: Tenant) -> None:
        Tenant.objects.filter(pk=tenant.pk).update(name="renamed")
        if tenant.slug == "t1":
            raise OverflowError("date value out of range")

    # when
    with caplog.at_level(logging.ERROR, logger="tessera.periodic"):
        report = run_each(tenants, rename, task="test", kind="tenant")
    # then the others ran, the bad one's write is undone, and the log names its id
    assert report.as_dict() == {"done": 2, "failed": 1, "failed_ids": [tenants[1].pk]}
    names = dict(Tenant.objects.values_list("slug", "name"))
    assert names == {"t0": "renamed", "t1": "T1", "t2": "renamed"}
    assert [r.getMessage() for r in caplog.records] == [f"test: tenant {tenants[1].pk} failed"]
    assert caplog.records[0].exc_info is not None


@pytest.mark.django_db
def test_counts_accumulate_into_a_given_report() -> None:
    report = ItemFailures(done=1, failed_ids=["x"])
    run_each([1, 2], lambda n: None, task="t", kind="n", failures=report)
    assert report.as_dict() == {"done": 3, "failed": 1, "failed_ids": ["x"]}
