"""Issue 16: deleting (retiring) a codespace template asks once, says what happens with the numbers,
and is in the operators' activity log, from the page, the API and the admin alike."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from codespaces.choices import CodespaceState as S
from codespaces.models import CodespaceTemplate
from codespaces.tests.factories import CodespaceFactory
from portal.models import OperatorAction

pytestmark = pytest.mark.django_db


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def used_template(template: Any, bob: Any, alice: Any, team_a: Any, quota_a: Any) -> Any:
    CodespaceFactory(owner=bob, tenant=team_a, quota=quota_a, template=template, state=S.RUNNING)
    CodespaceFactory(owner=alice, tenant=team_a, quota=quota_a, template=template, state=S.STOPPED)
    CodespaceFactory(owner=bob, tenant=team_a, quota=quota_a, template=template, state=S.DELETED)
    return template


def test_template_delete_confirmation_counts_what_keeps_working(
    operator: Any, used_template: Any
) -> None:
    page = client_for(operator).get(f"/codespaces/templates/{used_template.pk}/delete/")
    assert page.status_code == 200
    assert (
        f"Template {used_template.name} is no longer offered: developers cannot create codespaces "
        "from it. Its 2 codespace(s) of 1 team(s) (1 running or queued) keep working."
    ) in page.content.decode()
    assert CodespaceTemplate.objects.get(pk=used_template.pk).active


def test_template_delete_retires_redirects_and_is_audited(
    operator: Any, used_template: Any
) -> None:
    client = client_for(operator)
    done = client.post(
        f"/codespaces/templates/{used_template.pk}/delete/", {"reason": "image end of life"}
    )
    assert done["Location"] == "/codespaces/templates/"
    assert not CodespaceTemplate.objects.get(pk=used_template.pk).active
    entry = OperatorAction.objects.get()
    assert (entry.action, entry.target_name, entry.reason, entry.impact["codespaces"]) == (
        "template_retire",
        used_template.name,
        "image end of life",
        2,
    )
    listing = client.get("/codespaces/templates/").content.decode()
    assert f"Template {used_template.name} deleted (retired)" in listing
    # deleting it again changes nothing and records nothing
    client.post(f"/codespaces/templates/{used_template.pk}/delete/", {"reason": ""})
    assert OperatorAction.objects.count() == 1


def test_template_delete_page_is_for_operators_only(bob: Any, used_template: Any) -> None:
    client = client_for(bob)
    assert client.post(f"/codespaces/templates/{used_template.pk}/delete/").status_code == 404
    assert CodespaceTemplate.objects.get(pk=used_template.pk).active


def test_api_template_delete_with_reason_and_dry_run(
    operator: Any, api_as: Any, used_template: Any
) -> None:
    api = api_as(operator)
    url = f"/api/v1/templates/{used_template.pk}/"
    dry = api.delete(f"{url}?dry_run=1")
    assert (dry.status_code, dry.json()["impact"]["codespaces"]) == (200, 2)
    assert CodespaceTemplate.objects.get(pk=used_template.pk).active
    bad = api.delete(url, {"reason": 5}, format="json")
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {"reason": ["Must be text."]}
    assert api.delete(url, {"reason": "replaced by v2"}, format="json").status_code == 204
    assert OperatorAction.objects.get().reason == "replaced by v2"


def test_admin_retire_action_asks_for_a_reason_and_goes_through_the_service(
    operator: Any, used_template: Any
) -> None:
    client = client_for(operator)
    selected = {"action": "retire", "_selected_action": [used_template.pk]}
    page = client.post("/admin/codespaces/codespacetemplate/", selected)
    assert "Its 2 codespace(s) of 1 team(s) (1 running or queued) keep working." in (
        page.content.decode()
    )
    assert CodespaceTemplate.objects.get(pk=used_template.pk).active
    client.post(
        "/admin/codespaces/codespacetemplate/",
        {**selected, "apply": "1", "reason": "superseded"},
    )
    assert CodespaceTemplate.objects.filter(pk=used_template.pk, active=False).exists()
    entry = OperatorAction.objects.get()
    assert (entry.action, entry.reason) == ("template_retire", "superseded")
    # rows are never deleted from the admin (codespaces keep their template)
    delete_url = f"/admin/codespaces/codespacetemplate/{used_template.pk}/delete/"
    assert client.get(delete_url).status_code == 403
