"""The admin back office loads every codespaces model's changelist and change page; the stop action goes
through the service."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace
from codespaces.tests.factories import CodespaceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_ops(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def test_changelists_and_change_pages_load(
    admin_client_ops: Client, bob: Any, team_a: Any, quota_a: Any, template: Any
) -> None:
    codespace = CodespaceFactory(owner=bob, tenant=team_a, quota=quota_a, template=template)
    from codespaces import lifecycle

    event = lifecycle.record_event(codespace, "notice", "hello")
    for url in (
        "/admin/codespaces/codespacetemplate/",
        f"/admin/codespaces/codespacetemplate/{template.pk}/change/",
        "/admin/codespaces/codespace/",
        f"/admin/codespaces/codespace/{codespace.pk}/change/",
        "/admin/codespaces/codespaceevent/",
        f"/admin/codespaces/codespaceevent/{event.pk}/change/",
    ):
        assert admin_client_ops.get(url).status_code == 200, url


def test_admin_stop_action_asks_for_a_reason_then_uses_the_service(
    admin_client_ops: Client,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    running = CodespaceFactory(
        owner=bob, tenant=team_a, quota=quota_a, template=template, state=S.RUNNING
    )
    stopped = CodespaceFactory(
        owner=bob, tenant=team_a, quota=quota_a, template=template, state=S.STOPPED
    )
    selected = {"action": "stop_codespaces", "_selected_action": [running.pk, stopped.pk]}
    # the action first asks for the reason: nothing stops yet
    page = admin_client_ops.post("/admin/codespaces/codespace/", selected)
    assert page.status_code == 200
    assert "2 selected" in page.content.decode()
    assert Codespace.objects.get(pk=running.pk).state == S.RUNNING
    # an empty reason is refused on the same page, nothing stops
    refused = admin_client_ops.post(
        "/admin/codespaces/codespace/", {**selected, "apply": "1", "reason": "  "}
    )
    assert refused.status_code == 400
    assert "A reason is required" in refused.content.decode()
    assert Codespace.objects.get(pk=running.pk).state == S.RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client_ops.post(
            "/admin/codespaces/codespace/",
            {**selected, "apply": "1", "reason": "node maintenance at 14:00"},
            follow=True,
        )
    assert response.status_code == 200
    assert Codespace.objects.get(pk=running.pk).state == S.STOPPED
    assert (
        running.events.filter(
            message="Stopped by operator operator: node maintenance at 14:00"
        ).count()
        == 1
    )
    assert "is stopped; only a queued, placed, starting or running" in response.content.decode()


def test_admin_cannot_delete_a_codespace_row(
    admin_client_ops: Client, bob: Any, team_a: Any, quota_a: Any, template: Any
) -> None:
    codespace = CodespaceFactory(owner=bob, tenant=team_a, quota=quota_a, template=template)
    url = f"/admin/codespaces/codespace/{codespace.pk}/delete/"
    assert admin_client_ops.get(url).status_code == 403
    assert Codespace.objects.filter(pk=codespace.pk).exists()
