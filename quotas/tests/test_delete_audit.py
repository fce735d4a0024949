"""Issue 16: deleting a quota or a quota group asks once, on a page that says what will happen (with
the numbers), and the delete is in the operators' activity log (page and API, with a reason)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from portal.models import OperatorAction
from portal.tests.factories import TenantFactory
from quotas.models import Quota, QuotaGroup
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node

pytestmark = pytest.mark.django_db


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def empty_group() -> QuotaGroup:
    group = QuotaGroupFactory(name="inference", node_selector={"pool": "inference"})
    make_node("i1", pool="inference", gpu_count=4)
    make_node("i2", pool="inference", gpu_count=2)
    make_node("t1", pool="training", gpu_count=8)  # another pool's node: not counted
    return group


def test_group_delete_confirmation_counts_the_nodes_and_gpus_and_changes_nothing(
    operator: Any, empty_group: QuotaGroup
) -> None:
    page = client_for(operator).get(f"/quotas/groups/{empty_group.pk}/delete/")
    assert page.status_code == 200
    assert (
        "Group inference and its scheduling queue are removed: its 2 node(s) with 6 GPU(s) take no "
        "work through it any more. No quota or workload is affected."
    ) in page.content.decode()
    assert QuotaGroup.objects.filter(pk=empty_group.pk).exists()


def test_group_with_quotas_is_refused_on_the_confirmation_and_on_post(
    operator: Any, empty_group: QuotaGroup, team_a: Any, team_b: Any
) -> None:
    QuotaFactory(group=empty_group, tenant=team_a)
    QuotaFactory(group=empty_group, tenant=team_b)
    client = client_for(operator)
    page = client.get(f"/quotas/groups/{empty_group.pk}/delete/").content.decode()
    assert "Nothing: group inference still has 2 quota(s) of 2 team(s)" in page
    refused = client.post(f"/quotas/groups/{empty_group.pk}/delete/", {"version": 1}, follow=True)
    assert "Group inference still has 2 quota(s); delete them first." in refused.content.decode()
    assert QuotaGroup.objects.filter(pk=empty_group.pk).exists()
    assert not OperatorAction.objects.exists()


def test_group_delete_redirects_and_is_in_the_activity_log(
    operator: Any, empty_group: QuotaGroup
) -> None:
    client = client_for(operator)
    done = client.post(
        f"/quotas/groups/{empty_group.pk}/delete/", {"version": 1, "reason": "pool retired"}
    )
    assert done["Location"] == "/quotas/"
    assert not QuotaGroup.objects.filter(pk=empty_group.pk).exists()
    entry = OperatorAction.objects.get()
    assert (entry.action, entry.target_name, entry.reason, entry.actor_name) == (
        "quota_group_delete",
        "inference",
        "pool retired",
        "operator",
    )
    assert (entry.impact["nodes"], entry.impact["gpus"]) == (2, 6)
    # the message survives the redirect; the log's filter finds the row
    assert "Group inference deleted." in client.get("/quotas/").content.decode()
    log = client.get("/operators/activity/?action=quota_group_delete").content.decode()
    assert "pool retired" in log
    other = client.get("/operators/activity/?action=drain").content.decode()
    assert "pool retired" not in other


def test_quota_delete_is_in_the_activity_log_with_its_note(operator: Any) -> None:
    group = QuotaGroupFactory(name="training")
    quota = QuotaFactory(group=group, tenant=TenantFactory(slug="empty"))
    client_for(operator).post(f"/quotas/{quota.pk}/delete/", {"version": 1, "note": "team left"})
    assert not Quota.objects.filter(pk=quota.pk).exists()
    entry = OperatorAction.objects.get()
    assert (entry.action, entry.target_name, entry.reason) == (
        "quota_delete",
        "training/empty",
        "team left",
    )
    assert entry.summary == (
        "Quota empty of team empty left group training: the team can no longer start work "
        "there. Its history was kept."
    )


def test_quota_delete_with_too_long_note_is_refused_on_the_page(operator: Any) -> None:
    quota = QuotaFactory(group=QuotaGroupFactory(name="training"))
    refused = client_for(operator).post(f"/quotas/{quota.pk}/delete/", {"note": "x" * 501})
    assert refused.status_code == 400
    assert "at most 500 characters" in refused.content.decode()
    assert Quota.objects.filter(pk=quota.pk).exists()


def test_api_deletes_take_a_reason_a_dry_run_and_are_audited(
    operator: Any, api_as: Any, empty_group: QuotaGroup
) -> None:
    api = api_as(operator)
    url = f"/api/v1/quota-groups/{empty_group.pk}/"
    too_long = api.delete(url, {"reason": "x" * 501}, format="json", HTTP_IF_MATCH='"1"')
    assert too_long.status_code == 400
    assert too_long.json()["error"]["fields"] == {"reason": ["At most 500 characters (got 501)."]}
    dry = api.delete(f"{url}?dry_run=1")
    assert dry.status_code == 200
    assert (dry.json()["action"], dry.json()["impact"]["gpus"]) == ("quota_group_delete", 6)
    assert QuotaGroup.objects.filter(pk=empty_group.pk).exists()
    done = api.delete(f"{url}?reason=merged+into+training", HTTP_IF_MATCH='"1"')
    assert done.status_code == 204
    assert OperatorAction.objects.get().reason == "merged into training"
    listed = api.get("/api/v1/operator-actions/?action=quota_group_delete").json()
    assert [row["reason"] for row in listed["results"]] == ["merged into training"]
