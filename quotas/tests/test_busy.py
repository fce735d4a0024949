"""A quota PATCH that keeps losing lock races answers 503 `busy` and changes nothing, never a 500 (#4)."""

from __future__ import annotations

from typing import Any

import psycopg.errors
import pytest

from portal import transactions
from portal.tests.locks import lost_race
from quotas import services
from quotas.models import Quota, QuotaChange
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
