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
        f"Codespace bobs and its {bobs.home_gib} GiB home volume are deleted for good. "
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
