"""The quota-group form carries the polite-reclaim countdown: editing a group sets it (audited with the
group's change), a new group starts with it, and a bad value is a form error that saves nothing."""

from __future__ import annotations

from typing import Any

import pytest

from quotas import services
from quotas.models import QuotaChange, QuotaGroup

pytestmark = pytest.mark.django_db


def edit_post(group: QuotaGroup, **fields: Any) -> dict[str, Any]:
    data = {
        "description": group.description,
        "selector_key_0": "pool",
        "selector_value_0": "dev",
        "min_runtime_seconds": group.min_runtime_seconds,
        "sharing_mode": group.sharing_mode,
        "timeslice_replicas": group.timeslice_replicas,
        "version": group.version,
    }
    return data | fields


def test_editing_a_group_sets_its_reclaim_notice_and_audits_it(client: Any, operator: Any) -> None:
    group = services.create_group(name="dev", node_selector={"pool": "dev"}).obj
    client.force_login(operator)
    form = client.get(f"/quotas/groups/{group.pk}/edit/").content.decode()
    assert 'name="reclaim_notice_seconds"' in form

    answer = client.post(
        f"/quotas/groups/{group.pk}/edit/", edit_post(group, reclaim_notice_seconds=300)
    )

    assert answer.status_code == 302
    group.refresh_from_db()
    assert group.reclaim_notice_seconds == 300
    change = QuotaChange.objects.filter(group=group, subject="group").latest("id")
    before, after = change.before or {}, change.after or {}
    assert (before["reclaim_notice_seconds"], after["reclaim_notice_seconds"]) == (0, 300)
    assert change.actor == operator


def test_a_countdown_out_of_bounds_is_a_form_error_and_nothing_changes(
    client: Any, operator: Any
) -> None:
    group = services.create_group(name="dev", node_selector={"pool": "dev"}).obj
    client.force_login(operator)

    answer = client.post(
        f"/quotas/groups/{group.pk}/edit/",
        edit_post(group, reclaim_notice_seconds=10**9, description="changed"),
    )

    assert answer.status_code == 200
    assert "reclaim_notice_seconds" in answer.context["form"].errors
    group.refresh_from_db()
    assert (group.reclaim_notice_seconds, group.description) == (0, "")


def test_a_new_group_starts_with_the_countdown_it_was_given(client: Any, operator: Any) -> None:
    client.force_login(operator)
    answer = client.post(
        "/quotas/groups/new/",
        {"name": "lab", "selector_key_0": "pool", "selector_value_0": "lab",
         "reclaim_notice_seconds": 60},
    )  # fmt: skip
    assert answer.status_code == 302
    assert QuotaGroup.objects.get(name="lab").reclaim_notice_seconds == 60
