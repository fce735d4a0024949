"""The auditor's fairness-over-time invariants (issue 17): each reports a violation seeded directly in
the database, and stays quiet on the same rows written by the services."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from codespaces.choices import CodespaceState
from codespaces.tests.factories import CodespaceFactory, workload_in
from quotas import loans
from quotas.models import LoanState, Quota, QuotaLoan, ReclaimNotice, ReclaimNoticeState
from quotas.tests.factories import record_gpu_hours
from scheduling.models import Workload
from scheduling.services import audit
from scheduling.telemetry.models import QuotaSample, Resolution
from scheduling.tests.factories import make_group, make_quota, small_cluster
from scheduling.tests.test_audit import add_share, findings, placed, quota, submit

pytestmark = pytest.mark.django_db
__all__ = ["placed", "quota"]  # fixtures shared with test_audit


@pytest.fixture
def pool(db: Any) -> tuple[Quota, Quota]:
    """A two-GPU pool with a lender (min 2 GPUs) and a borrower (no min)."""
    small_cluster(gpu_nodes=1, gpus_per_node=2, cpu_nodes=1)
    group = make_group()
    return make_quota(group, gpu_min_milli=2000), make_quota(group)


def approved_loan(lender: Quota | None, borrower: Quota, operator: Any, gpus: int) -> QuotaLoan:
    now = timezone.now()
    loan = loans.request_loan(
        borrower=borrower,
        lender=lender,
        gpus=gpus,
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(hours=1),
        actor=operator,
    )
    return loans.decide_loan(loan, approve=True, actor=operator)


def test_a_loan_beyond_the_lenders_min_is_reported(pool: Any, operator: Any) -> None:
    lender, borrower = pool
    loan = approved_loan(lender, borrower, operator, gpus=2)
    assert findings("loan_within_min", later=False) == []
    # when the lender's min is lowered under the loan behind the loan's back
    Quota.objects.filter(pk=lender.pk).update(gpu_min_gpu_milli=1000)
    rows = findings("loan_within_min", later=False)
    assert rows == [
        {
            "rule": "lender's min",
            "quota_id": lender.pk,
            "quota": f"training/{lender.name}",
            "loans": 1,
            "lent_gpus": 2,
            "min_gpus": 1,
            "effective_min_gpus": -1,
        }
    ]
    # an expired loan moves nothing any more
    QuotaLoan.objects.filter(pk=loan.pk).update(ends_at=timezone.now() - timedelta(seconds=1))
    assert findings("loan_within_min", later=False) == []


def test_operators_lending_more_than_the_unassigned_gpus_is_reported(
    pool: Any, operator: Any
) -> None:
    lender, borrower = pool
    # the lender's min promises both GPUs: the operators have nothing to lend
    now = timezone.now()
    QuotaLoan.objects.create(
        group=borrower.group,
        lender=None,
        borrower=borrower,
        gpus=1,
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(hours=1),
        state=LoanState.APPROVED,
    )
    rows = findings("loan_within_min", later=False)
    assert rows == [
        {
            "rule": "group capacity",
            "group": "training",
            "capacity_gpus": 2,
            "min_gpus": 2,
            "lent_by_operators_gpus": 1,
        }
    ]


def test_a_loan_change_missing_from_the_history_is_reported(pool: Any, operator: Any) -> None:
    lender, borrower = pool
    loan = approved_loan(lender, borrower, operator, gpus=1)
    assert findings("loan_audited") == []
    # when a transition is written without its history row
    QuotaLoan.objects.filter(pk=loan.pk).update(state=LoanState.EXPIRED, version=3)
    rows = findings("loan_audited")
    assert [(r["quota_id"], r["versions_not_audited"], r["audited_state"]) for r in rows] == [
        (borrower.pk, [3], "(none)"),
        (lender.pk, [3], "(none)"),
    ]


def notice(placed: Workload, deadline_in: timedelta, **fields: Any) -> ReclaimNotice:
    now = timezone.now()
    return ReclaimNotice.objects.create(
        group=placed.quota.group,
        quota=placed.quota,
        workload_id=placed.pk,
        workload_name=placed.name,
        workload_kind=placed.kind,
        victim_name=placed.name,
        reason="test",
        noticed_at=now - timedelta(minutes=5),
        deadline=now + deadline_in,
        **fields,
    )


def test_an_open_reclaim_notice_past_its_deadline_is_reported(placed: Workload) -> None:
    late = notice(placed, timedelta(seconds=-5))
    # within grace it is the next cycle's job; after grace it is a violation
    assert findings("reclaim_notice_closed", later=False) == []
    rows = findings("reclaim_notice_closed")
    assert [(r["notice_id"], r["still_running"]) for r in rows] == [(late.pk, True)]
    # closed, it is fine
    ReclaimNotice.objects.filter(pk=late.pk).update(state=ReclaimNoticeState.EXECUTED)
    assert findings("reclaim_notice_closed") == []


def test_an_open_notice_still_counting_down_is_not_reported(placed: Workload) -> None:
    notice(placed, audit.BUDGET_HORIZON)  # due long after the audit
    assert findings("reclaim_notice_closed") == []


def test_a_suspended_codespace_not_stopped_or_without_its_home_is_reported(
    quota: Any, bob: Any
) -> None:
    kept, failed, homeless = (
        CodespaceFactory(
            owner=bob,
            tenant=quota.tenant,
            quota=quota,
            state=state,
            workload=workload_in(quota, "released"),
        )
        for state in (CodespaceState.STOPPED, CodespaceState.FAILED, CodespaceState.STOPPED)
    )
    for codespace in (kept, failed, homeless):
        home = "" if codespace is homeless else codespace.home_volume_name
        Workload.objects.filter(pk=codespace.workload_id).update(home_volume=home)
        notice(
            codespace.workload,
            timedelta(minutes=-4),
            state=ReclaimNoticeState.EXECUTED,
            closed_at=timezone.now() - timedelta(minutes=4),
        )
    rows = findings("codespace_suspended")
    assert [(r["codespace_id"], r["problem"]) for r in rows] == [
        (failed.pk, "failed, not stopped"),
        (homeless.pk, "its workload did not mount the codespace's home volume"),
    ]


def test_a_person_above_the_per_user_cap_is_reported(placed: Workload, bob: Any) -> None:
    Quota.objects.filter(pk=placed.quota_id).update(max_gpus_per_user=1)
    Workload.objects.filter(pk=placed.pk).update(owner=bob)
    assert findings("user_cap", later=False) == []  # half a GPU of one
    # when bob gets a second share past the scheduler: 0.5 + 0.6 GPUs
    second = add_share(placed, gpu_milli=600, gpu_memory_mib=1024)
    Workload.objects.filter(pk=second.workload_id).update(owner=bob)
    rows = findings("user_cap", later=False)
    assert [(r["user"], r["workloads"], r["held_gpu_milli"], r["cap_gpu_milli"]) for r in rows] == [
        (bob.username, 2, 1100, 1000)
    ]


def test_usage_counted_twice_or_negative_is_reported(quota: Any) -> None:
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    first = record_gpu_hours(quota, hour, 1.0)
    following = record_gpu_hours(quota, hour + timedelta(hours=1), 1.0)  # the next hour: fine
    assert findings("budget_usage", later=False) == []
    # an hour row starting half-way through another one, and a negative minute
    twice = record_gpu_hours(quota, hour + timedelta(minutes=30), 0.5)
    negative = QuotaSample.objects.create(
        resolution=Resolution.MINUTE,
        ts=hour,
        group=quota.group,
        quota=quota,
        tenant=quota.tenant,
        gpu_model="H100",
        allocated_milli=-5,
    )
    rows = findings("budget_usage", later=False)
    # the half-way row overlaps the hour before it, and the hour after it overlaps the half-way row
    assert sorted((r["sample_id"], r["problem"], r.get("overlaps_sample_id")) for r in rows) == (
        sorted(
            [
                (twice.pk, "counted twice", first.pk),
                (following.pk, "counted twice", twice.pk),
                (negative.pk, "negative usage", None),
            ]
        )
    )


def test_a_workload_submitted_by_the_services_within_the_cap_is_not_reported(
    quota: Any, bob: Any, django_capture_on_commit_callbacks: Any
) -> None:
    Quota.objects.filter(pk=quota.pk).update(max_gpus_per_user=1)
    with django_capture_on_commit_callbacks(execute=True):
        submit(quota, "one", gpu_count=1, gpu_milli=1000, owner=bob)
        submit(quota, "two", gpu_count=1, gpu_milli=1000, owner=bob)
    assert findings("user_cap", later=False) == []
