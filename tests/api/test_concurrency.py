"""Optimistic concurrency on quota updates (issue 7): two operators editing at once cannot lose an update."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import requests

from portal.services import issue_token
from quotas.models import Quota
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory


@pytest.fixture
def quota(team_a: Any) -> Quota:
    group = QuotaGroupFactory(name="pool-x", node_selector={"pool": "pool-x"})
    return QuotaFactory(group=group, tenant=team_a, name="team-a")


@pytest.mark.django_db
def test_update_needs_if_match_and_returns_the_new_etag(
    quota: Quota, operator: Any, api_as: Any
) -> None:
    client = api_as(operator)
    read = client.get(f"/api/v1/quotas/{quota.pk}/")
    assert read.status_code == 200
    etag = read["ETag"]
    assert etag == f'"{quota.version}"'

    missing = client.patch(f"/api/v1/quotas/{quota.pk}/", {"shared_weight": 3}, format="json")
    assert missing.status_code == 428
    assert missing.json()["error"]["code"] == "precondition_required"

    updated = client.patch(
        f"/api/v1/quotas/{quota.pk}/", {"shared_weight": 3}, format="json", HTTP_IF_MATCH=etag
    )
    assert updated.status_code == 200
    assert updated["ETag"] == f'"{quota.version + 1}"'

    stale = client.patch(
        f"/api/v1/quotas/{quota.pk}/", {"shared_weight": 4}, format="json", HTTP_IF_MATCH=etag
    )
    assert stale.status_code == 412
    assert stale.json()["error"]["code"] == "precondition_failed"
    assert stale["ETag"] == f'"{quota.version + 1}"'
    quota.refresh_from_db()
    assert quota.shared_weight == 3


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_updates_with_the_same_if_match_one_200_one_412(
    live_server: Any, quota: Quota, operator: Any
) -> None:
    # given two operators who both read version 1
    tokens = [issue_token(operator, name=f"op{i}").raw for i in range(2)]
    etag = f'"{quota.version}"'
    barrier = threading.Barrier(2)
    results: dict[int, tuple[int, Any]] = {}

    def edit(index: int, weight: int) -> None:
        barrier.wait()
        response = requests.patch(
            f"{live_server.url}/api/v1/quotas/{quota.pk}/",
            json={"shared_weight": weight},
            headers={"Authorization": f"Bearer {tokens[index]}", "If-Match": etag},
            timeout=30,
        )
        results[index] = (response.status_code, response.json())

    # when both send their edit at the same moment
    threads = [threading.Thread(target=edit, args=(i, w)) for i, w in ((0, 5), (1, 7))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # then exactly one wins, the other is told the object changed, and the stored weight is the winner's
    statuses = sorted(status for status, _ in results.values())
    assert statuses == [200, 412]
    winner = next(i for i, (status, _) in results.items() if status == 200)
    loser = 1 - winner
    assert results[loser][1]["error"]["code"] == "precondition_failed"
    quota.refresh_from_db()
    assert quota.version == 2
    assert quota.shared_weight == (5, 7)[winner]
