"""Real concurrent transactions on PostgreSQL: a quota edit locks the group and quota rows only, and
without blocking foreign-key checks (FOR NO KEY UPDATE), so it never deadlocks with the minute's
telemetry ingestion, whose samples reference the tenant, quota and group rows (#4)."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection

from portal.tests.locks import start, wait_until_blocked_on_a_lock
from quotas import services as quota_services
from quotas.models import Quota
from scheduling import services
from scheduling.services import workloads
from scheduling.telemetry import ingestion
from scheduling.telemetry.models import QuotaSample
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="row locks and deadlocks need PostgreSQL"
    ),
]

MINUTE = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def test_quota_patch_racing_telemetry_ingestion_answers_200_and_nothing_deadlocks(
    operator: Any, api_as: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    monkeypatch.setattr(workloads, "trigger_cycle", lambda group_id: None)
    caplog.set_level(logging.WARNING)
    # given a running GPU workload charged to a quota
    small_cluster(gpu_nodes=1, gpus_per_node=4)
    quota = make_quota(make_group())
    services.submit_workload(
        tenant=quota.tenant, quota=quota, kind="job_pod", name="train", cpu_milli=1000,
        memory_mib=1024, gpu_count=1, gpu_milli=1000,
    )  # fmt: skip
    assert services.run_cycle(quota.group_id).placed == 1
    # and an operator's edit of the quota that holds the group row and is about to lock the quota row
    holds_group, go_on = threading.Event(), threading.Event()
    real_lock_group = quota_services._lock_group

    def lock_group_then_wait(group_id: int) -> Any:
        group = real_lock_group(group_id)
        holds_group.set()
        go_on.wait(10)
        return group

    monkeypatch.setattr(quota_services, "_lock_group", lock_group_then_wait)
    client = api_as(operator)
    patch, patched = start(
        lambda: client.patch(
            f"/api/v1/quotas/{quota.pk}/",
            {"gpu_max_gpu_milli": 3000},
            format="json",
            HTTP_IF_MATCH=f'"{quota.version}"',
        )
    )
    assert holds_group.wait(10)
    # when the minute's telemetry is ingested meanwhile (at its commit, the foreign-key checks of
    # its samples share-lock the tenant and quota rows, then the group row), and the edit goes on
    ingest, ingested = start(lambda: ingestion.ingest_minute(MINUTE))
    wait_until_blocked_on_a_lock(ingest, timeout=5)
    go_on.set()
    ingest.join(30)
    patch.join(30)
    # then both succeed without a deadlock on the way
    assert ingested.error is None, ingested.error
    assert patched.error is None, patched.error
    assert patched.value.status_code == 200, patched.value.content
    assert Quota.objects.get(pk=quota.pk).gpu_max_gpu_milli == 3000
    assert QuotaSample.objects.filter(quota=quota, ts=MINUTE).count() >= 1
    assert [r.getMessage() for r in caplog.records if "deadlock" in r.getMessage()] == []
