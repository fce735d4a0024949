"""Query budgets of the API's own list endpoints and of the cross-cutting layer (issue 7, convention 10).

Per authenticated request the API layer costs: 1 token lookup (+ at most one last-used write a minute),
1 rate-limit upsert for all buckets, 1 membership read (shared with tenant scoping). The list itself is
one query whatever the number of rows.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.services import issue_token
from portal.tests.factories import MembershipFactory, TenantFactory
from quotas.models import BudgetTopUp, GpuHourBudget, Quota, QuotaGroup, QuotaLoan
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory


@pytest.mark.django_db
@pytest.mark.parametrize(("_case", "rows"), [("one row", 1), ("many rows", 20)])
def test_tenants_list_costs_three_queries(
    _case: str, rows: int, bob: Any, api_as: Any, django_assert_num_queries: Any
) -> None:
    for index in range(rows - 1):
        MembershipFactory(user=bob, tenant=TenantFactory(slug=f"extra-{index}"))
    client = api_as(bob)
    client.get("/api/v1/me/")  # warm: the token's last-used write happens once a minute
    with django_assert_num_queries(3):  # token with memberships, rate upsert, tenants
        response = client.get("/api/v1/tenants/")
    assert response.status_code == 200
    assert len(response.json()["results"]) == rows


@pytest.mark.django_db
@pytest.mark.parametrize(("_case", "rows"), [("one row", 1), ("many rows", 20)])
def test_tokens_list_costs_three_queries(
    _case: str, rows: int, bob: Any, api_as: Any, django_assert_num_queries: Any
) -> None:
    client = api_as(bob)
    for index in range(rows - 1):
        issue_token(bob, name=f"t{index}")
    client.get("/api/v1/me/")
    with django_assert_num_queries(3):  # token with memberships, rate upsert, tokens
        response = client.get("/api/v1/tokens/")
    assert response.status_code == 200
    assert len(response.json()["results"]) == rows


@pytest.mark.django_db
def test_idempotent_post_is_one_transaction_and_a_replay_never_reaches_the_view(
    bob: Any, api_as: Any, django_assert_num_queries: Any
) -> None:
    client = api_as(bob)
    client.get("/api/v1/me/")
    postgresql = connection.vendor == "postgresql"
    # the request's transaction (a savepoint here: 2) with the key's lock (PostgreSQL), the record's
    # read, token with memberships (the three sent together on PostgreSQL), rate upsert, the view's
    # own atomic block (4: the minting token's row lock, so a revocation cannot race the new child,
    # and the INSERT), and the answer's INSERT. In production: one transaction, whose COMMIT
    # travels with the answer.
    with django_assert_num_queries(11 if postgresql else 10):
        first = client.post(
            "/api/v1/tokens/", {"name": "ci"}, format="json", HTTP_IDEMPOTENCY_KEY="k"
        )
    assert first.status_code == 201
    # the stored response is read (with the lock and the token lookup, one round trip, on
    # PostgreSQL): no authentication, no rate counting, no view
    with django_assert_num_queries(5 if postgresql else 3):
        replay = client.post(
            "/api/v1/tokens/", {"name": "ci"}, format="json", HTTP_IDEMPOTENCY_KEY="k"
        )
    assert replay.content == first.content


# ------------------------------------------------------------------- the quotas app's lists (issue 38)


def _quota_rows(count: int) -> None:
    """`count` more quotas, each with a topped-up budget and a loan from the first quota of group `q`.
    One group: the quota and group lists compute each group's usage once (a cost per group, not per
    row)."""
    group = QuotaGroup.objects.filter(name="q").first() or QuotaGroupFactory(
        name="q", node_selector={"pool": "q"}
    )
    lender = Quota.objects.filter(group=group).order_by("id").first() or QuotaFactory(group=group)
    now = timezone.now()
    for _ in range(count):
        quota = QuotaFactory(group=group)
        budget = GpuHourBudget.objects.create(quota=quota, limit_gpu_hours=100)
        BudgetTopUp.objects.create(budget=budget, period_start=now, gpu_hours=5, reason="r")
        QuotaLoan.objects.create(
            group=group,
            lender=lender,
            borrower=quota,
            gpus=1,
            starts_at=now,
            ends_at=now + timedelta(days=1),
        )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    ["/api/v1/quota-budgets/", "/api/v1/quotas/", "/api/v1/quota-loans/"],
)
def test_a_quotas_list_costs_the_same_queries_for_3_rows_as_for_30(
    path: str, operator: Any, api_as: Any
) -> None:
    client = api_as(operator)
    client.get("/api/v1/me/")
    counts = []
    for rows in (3, 27):
        _quota_rows(rows)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path, {"limit": 100})
        assert response.status_code == 200, response.content
        assert len(response.json()["results"]) >= rows
        counts.append(len(queries))
    assert counts[0] == counts[1], f"{path}: {counts[0]} queries for 3 rows, {counts[1]} for 30"
