"""A quota PATCH that keeps losing lock races answers 503 `busy` and changes nothing, never a 500 (#4)."""

from __future__ import annotations

from typing import Any

import psycopg.errors
import pytest

from portal import transactions
from portal.errors import Busy
from portal.tests.locks import lost_race
from quotas import services
from quotas.models import Quota, QuotaChange, QuotaGroup
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node

pytestmark = pytest.mark.django_db


def test_quota_patch_that_loses_every_lock_race_answers_503_and_changes_nothing(
    team_a: Any, operator: Any, api_as: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    # given a quota, and a database where every attempt to change it is a serialization failure
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=8)
    quota = QuotaFactory(group=group, tenant=team_a, gpu_max_gpu_milli=4000)
    settings.TESSERA_DB_RETRY_ATTEMPTS = 2
    monkeypatch.setattr(transactions.time, "sleep", lambda seconds: None)

    def serialization_failure(**kwargs: Any) -> Any:
        raise lost_race(psycopg.errors.SerializationFailure(), "could not serialize access")

    monkeypatch.setattr(services, "_audit", serialization_failure)
    # when an operator raises its max
    response = api_as(operator).patch(
        f"/api/v1/quotas/{quota.pk}/",
        {"gpu_max_gpu_milli": 6000},
        format="json",
        HTTP_IF_MATCH=f'"{quota.version}"',
    )
    # then the API says to retry and the quota is as it was, with no history row
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "busy"
    assert response["Retry-After"] == "1"
    saved = Quota.objects.get(pk=quota.pk)
    assert (saved.gpu_max_gpu_milli, saved.version) == (4000, quota.version)
    assert not QuotaChange.objects.filter(action="updated").exists()


@pytest.mark.parametrize("times", [1, None], ids=["loses-once", "loses-every-time"])
def test_group_patch_is_retried_and_answers_503_only_when_every_attempt_loses(
    times: int | None,
    operator: Any,
    api_as: Any,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    # given a group, and a database where recording the change deadlocks once / every time
    group = QuotaGroupFactory(name="training", description="before")
    settings.TESSERA_DB_RETRY_ATTEMPTS = 3
    monkeypatch.setattr(transactions.time, "sleep", lambda seconds: None)
    attempts: list[int] = []
    audit = services._audit

    def deadlocked(**kwargs: Any) -> Any:
        attempts.append(1)
        if times is None or len(attempts) <= times:
            raise lost_race(psycopg.errors.DeadlockDetected())
        return audit(**kwargs)

    monkeypatch.setattr(services, "_audit", deadlocked)
    api = api_as(operator)
    api.raise_request_exception = False
    # when an operator changes its description
    response = api.patch(
        f"/api/v1/quota-groups/{group.pk}/",
        {"description": "after"},
        format="json",
        HTTP_IF_MATCH=f'"{group.version}"',
    )
    saved = QuotaGroup.objects.get(pk=group.pk)
    if times is None:
        # then after 3 lost attempts the API says to retry and the group is as it was
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "busy"
        assert len(attempts) == 3
        assert (saved.description, saved.version) == ("before", group.version)
        assert not QuotaChange.objects.filter(action="updated").exists()
    else:
        # then the second attempt changed it once, with one history row
        assert response.status_code == 200, response.json()
        assert len(attempts) == 2
        assert (saved.description, saved.version) == ("after", group.version + 1)
        assert QuotaChange.objects.filter(action="updated").count() == 1


@pytest.mark.parametrize("times", [1, None], ids=["loses-once", "loses-every-time"])
def test_group_create_and_delete_are_retried_when_they_lose_a_lock_race(
    times: int | None, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.TESSERA_DB_RETRY_ATTEMPTS = 2
    monkeypatch.setattr(transactions.time, "sleep", lambda seconds: None)
    audit = services._audit
    attempts: list[int] = []

    def deadlocked(**kwargs: Any) -> Any:
        attempts.append(1)
        if times is None or len(attempts) % 2 == 1:
            raise lost_race(psycopg.errors.DeadlockDetected())
        return audit(**kwargs)

    monkeypatch.setattr(services, "_audit", deadlocked)
    if times is None:
        with pytest.raises(Busy):
            services.create_group(name="inference", node_selector={"pool": "inference"})
        assert not QuotaGroup.objects.filter(name="inference").exists()
        return
    group = services.create_group(name="inference", node_selector={"pool": "inference"}).obj
    assert QuotaGroup.objects.filter(name="inference").count() == 1
    services.delete_group(group.pk, expected_version=group.version)
    assert not QuotaGroup.objects.filter(name="inference").exists()
    assert len(attempts) == 4
