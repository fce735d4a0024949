"""Issue 16: deleting a codespace asks once, on a page that works without JavaScript and says what is
lost; only the people who may delete it see it."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace
from codespaces.tests.factories import CodespaceFactory
from codespaces.tests.test_views import client_for
from portal.models import OperatorAction

pytestmark = pytest.mark.django_db


@pytest.fixture
def bobs(bob: Any, team_a: Any, quota_a: Any, template: Any) -> Codespace:
    return CodespaceFactory(
        name="bobs", owner=bob, tenant=team_a, quota=quota_a, template=template, state=S.STOPPED
    )


def test_detail_links_to_one_confirmation_without_a_script_prompt(
    bob: Any, bobs: Codespace
) -> None:
    html = client_for(bob).get(reverse("codespaces:detail", args=[bobs.pk])).content.decode()
    assert f'href="{reverse("codespaces:delete", args=[bobs.pk])}"' in html
    assert "data-confirm" not in html


def test_delete_confirmation_says_what_is_lost_and_changes_nothing(
    bob: Any,
    bobs: Codespace,
) -> None:
    page = client_for(bob).get(reverse("codespaces:delete", args=[bobs.pk]))
    assert page.status_code == 200
    assert (
        f"Codespace bobs of bob and its {bobs.home_gib} GiB home volume are deleted for good. "
        "This cannot be undone."
    ) in page.content.decode()
    assert Codespace.objects.get(pk=bobs.pk).state == S.STOPPED


@pytest.mark.parametrize(("_case", "persona", "status"), [("other team", "charlie", 404)])
def test_others_get_no_delete_confirmation(
    _case: str,
    persona: str,
    status: int,
    bobs: Codespace,
    request: Any,
) -> None:
    client = client_for(request.getfixturevalue(persona))
    assert client.get(reverse("codespaces:delete", args=[bobs.pk])).status_code == status
    assert client.post(reverse("codespaces:delete", args=[bobs.pk])).status_code == status
    assert Codespace.objects.get(pk=bobs.pk).state == S.STOPPED


def test_owner_deletes_without_a_reason_and_leaves_no_operator_row(
    bob: Any, bobs: Codespace
) -> None:
    response = client_for(bob).post(reverse("codespaces:delete", args=[bobs.pk]))
    assert response["Location"] == reverse("codespaces:list")
    assert Codespace.objects.get(pk=bobs.pk).state == S.DELETED
    assert not OperatorAction.objects.exists()


def test_operator_delete_of_someone_elses_codespace_needs_a_reason_and_is_audited(
    operator: Any, bobs: Codespace
) -> None:
    client = client_for(operator)
    url = reverse("codespaces:delete", args=[bobs.pk])
    page = client.get(url).content.decode()
    assert 'name="reason"' in page
    refused = client.post(url, {"reason": " "})
    assert refused.status_code == 400
    assert "A reason is required" in refused.content.decode()
    assert Codespace.objects.get(pk=bobs.pk).state == S.STOPPED
    assert not OperatorAction.objects.exists()
    response = client.post(url, {"reason": "bob left the company"})
    assert response["Location"] == reverse("codespaces:list")
    assert Codespace.objects.get(pk=bobs.pk).state == S.DELETED
    entry = OperatorAction.objects.get()
    assert (entry.action, entry.target_kind, entry.target_name, entry.reason, entry.actor_name) == (
        "codespace_delete",
        "codespace",
        "bob/bobs",
        "bob left the company",
        "operator",
    )
    assert entry.summary.startswith("Codespace bobs of bob and its ")
    # the owner reads who and why in the timeline
    assert bobs.events.filter(message="Deleted by operator: bob left the company").count() == 1


def test_api_delete_of_someone_elses_codespace_without_reason_is_400_naming_reason(
    operator: Any, bobs: Codespace, api_as: Any
) -> None:
    api = api_as(operator)
    response = api.delete(f"/api/v1/codespaces/{bobs.pk}/")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "reason": ["A reason is required: it is shown to the people whose work this moves."]
    }
    assert Codespace.objects.get(pk=bobs.pk).state == S.STOPPED
    too_long = api.delete(f"/api/v1/codespaces/{bobs.pk}/", {"reason": "x" * 501}, format="json")
    assert too_long.status_code == 400
    assert too_long.json()["error"]["fields"] == {"reason": ["At most 500 characters (got 501)."]}
    dry = api.delete(f"/api/v1/codespaces/{bobs.pk}/?dry_run=1&reason=cleanup")
    assert dry.status_code == 200
    assert dry.json()["impact"]["codespaces"] == 1
    assert Codespace.objects.get(pk=bobs.pk).state == S.STOPPED
    done = api.delete(f"/api/v1/codespaces/{bobs.pk}/", {"reason": "cleanup"}, format="json")
    assert done.status_code == 204
    assert OperatorAction.objects.get().reason == "cleanup"
