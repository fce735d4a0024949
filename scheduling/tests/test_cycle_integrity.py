"""A cycle that breaks a database constraint: retried once on a fresh snapshot (a race), raised when the
retry breaks it again (a fault), never swallowed."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError

from scheduling import services
from scheduling.choices import WorkloadState
from scheduling.models import Placement, Workload
from scheduling.services import cycle
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db


def _pending_workload() -> Workload:
    small_cluster(gpu_nodes=1, gpus_per_node=1)
    quota = make_quota(make_group())
    return services.submit_workload(
        tenant=quota.tenant,
        quota=quota,
        kind="job_pod",
        name="w",
        cpu_milli=1000,
        memory_mib=1024,
        gpu_count=1,
        gpu_milli=1000,
    )


def test_an_integrity_error_the_retry_meets_again_is_raised_and_nothing_is_written(
    monkeypatch: Any,
) -> None:
    w = _pending_workload()
    calls: list[int] = []

    def violates(*args: Any, **kwargs: Any) -> list[int]:
        calls.append(1)
        raise IntegrityError("duplicate key value violates one_active_placement_per_workload")

    monkeypatch.setattr(cycle, "_persist", violates)
    with pytest.raises(IntegrityError, match="one_active_placement_per_workload"):
        services.run_cycle(w.quota.group_id)
    assert len(calls) == 2  # tried, then retried once on a fresh snapshot
    w.refresh_from_db()
    assert w.state == WorkloadState.PENDING
    assert not Placement.objects.filter(workload=w).exists()


def test_an_integrity_error_once_is_a_race_the_retry_on_a_fresh_snapshot_resolves(
    monkeypatch: Any,
) -> None:
    w = _pending_workload()
    persist = cycle._persist
    calls: list[int] = []

    def violates_once(*args: Any, **kwargs: Any) -> list[int]:
        calls.append(1)
        if len(calls) == 1:
            raise IntegrityError("duplicate key value violates one_active_placement_per_workload")
        return persist(*args, **kwargs)

    monkeypatch.setattr(cycle, "_persist", violates_once)
    report = services.run_cycle(w.quota.group_id)
    assert (report.retried, report.placed) == (True, 1)
    w.refresh_from_db()
    assert w.state == WorkloadState.PLACED
