"""Deleting a topped-up GPU-hour budget, or its quota, is clean; one that vanished is a 404 (issue 38 #2).

A budget with top-ups is deleted with them (API), and deleting its quota takes the budget and the top-ups
along. When the budget disappears between the view's read and the service's lock (a concurrent delete of
it or of its quota), deleting it again or topping it up is a 404 in the API and the quota page's refusal (its sentence, 400)
in the UI, never a 500 (`GpuHourBudget.DoesNotExist`).
"""

from __future__ import annotations

from typing import Any

import pytest

from quotas import budgets
from quotas.api.fairness import QuotaBudgetViewSet
from quotas.models import BudgetTopUp, GpuHourBudget, Quota
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def topped_up(team_a: Any, operator: Any) -> GpuHourBudget:
    group = QuotaGroupFactory(name="training", node_selector={"pool": "training"})
    quota = QuotaFactory(group=group, tenant=team_a, name="team-a")
    budget = budgets.create_budget(quota, {"limit_gpu_hours": "100"}, actor=operator)
    budgets.top_up_budget(budget, "50", actor=operator, reason="paper deadline")
    return budget


def _vanishing(monkeypatch: Any, *, delete: str) -> None:
    """The view reads the budget, then (as a concurrent request would) the budget or its quota is
    deleted before the service locks it."""
    read = QuotaBudgetViewSet.get_object

    def get_object(self: QuotaBudgetViewSet) -> GpuHourBudget:
        budget = read(self)
        if delete == "quota":
            Quota.objects.filter(pk=budget.quota_id).delete()
        else:
            GpuHourBudget.objects.filter(pk=budget.pk).delete()
        return budget

    monkeypatch.setattr(QuotaBudgetViewSet, "get_object", get_object)


def test_deleting_a_topped_up_budget_deletes_its_top_ups(
    topped_up: GpuHourBudget, operator: Any, api_as: Any
) -> None:
    client = api_as(operator)
    assert client.delete(f"/api/v1/quota-budgets/{topped_up.pk}/").status_code == 204
    assert not GpuHourBudget.objects.exists()
    assert not BudgetTopUp.objects.exists()
    again = client.delete(f"/api/v1/quota-budgets/{topped_up.pk}/")
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "not_found"


def test_deleting_the_quota_of_a_topped_up_budget_deletes_the_budget_and_its_top_ups(
    topped_up: GpuHourBudget, operator: Any, api_as: Any
) -> None:
    quota = topped_up.quota
    response = api_as(operator).delete(
        f"/api/v1/quotas/{quota.pk}/", HTTP_IF_MATCH=f'"{quota.version}"'
    )
    assert response.status_code == 204, response.content
    assert not Quota.objects.filter(pk=quota.pk).exists()
    assert not GpuHourBudget.objects.exists()
    assert not BudgetTopUp.objects.exists()


@pytest.mark.parametrize("delete", ["budget", "quota"])
def test_deleting_a_budget_deleted_meanwhile_is_a_404(
    delete: str, topped_up: GpuHourBudget, operator: Any, api_as: Any, monkeypatch: Any
) -> None:
    _vanishing(monkeypatch, delete=delete)
    response = api_as(operator).delete(f"/api/v1/quota-budgets/{topped_up.pk}/")
    assert response.status_code == 404, response.content
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert f"budget {topped_up.pk} no longer exists" in error["message"]


@pytest.mark.parametrize("delete", ["budget", "quota"])
def test_topping_up_a_budget_deleted_meanwhile_is_a_404(
    delete: str, topped_up: GpuHourBudget, operator: Any, api_as: Any, monkeypatch: Any
) -> None:
    _vanishing(monkeypatch, delete=delete)
    response = api_as(operator).post(
        f"/api/v1/quota-budgets/{topped_up.pk}/top-up/",
        {"gpu_hours": "10", "reason": "deadline"},
        format="json",
    )
    assert response.status_code == 404, response.content
    assert response.json()["error"]["code"] == "not_found"
    assert BudgetTopUp.objects.count() == 0


def test_topping_up_from_the_quota_page_a_budget_deleted_meanwhile_says_so(
    topped_up: GpuHourBudget, operator: Any, client: Any, monkeypatch: Any
) -> None:
    quota = topped_up.quota
    top_up = budgets.top_up_budget

    def deleted_first(budget: GpuHourBudget, *args: Any, **kwargs: Any) -> Any:
        GpuHourBudget.objects.filter(pk=budget.pk).delete()
        return top_up(budget, *args, **kwargs)

    monkeypatch.setattr(budgets, "top_up_budget", deleted_first)
    client.force_login(operator)
    response = client.post(
        f"/quotas/{quota.pk}/fairness/",
        {"action": "top_up", "budget": topped_up.pk, "gpu_hours": "5", "reason": "deadline"},
    )
    # the page's refusal shape: the card again with the service's sentence (400), not a 500
    assert response.status_code == 400
    assert f"GPU-hour budget {topped_up.pk} no longer exists" in response.content.decode()
    assert BudgetTopUp.objects.count() == 0


def test_deleting_a_topped_up_quota_deleted_meanwhile_is_the_gone_conflict(
    topped_up: GpuHourBudget, operator: Any, api_as: Any, monkeypatch: Any
) -> None:
    # the quota service's rule for a quota that vanished under a write (409 `gone`), not a 500
    from quotas.api.views import QuotaViewSet

    read = QuotaViewSet.get_object

    def get_object(self: QuotaViewSet) -> Quota:
        quota = read(self)
        Quota.objects.filter(pk=quota.pk).delete()
        return quota

    monkeypatch.setattr(QuotaViewSet, "get_object", get_object)
    quota = topped_up.quota
    response = api_as(operator).delete(
        f"/api/v1/quotas/{quota.pk}/", HTTP_IF_MATCH=f'"{quota.version}"'
    )
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "gone"
