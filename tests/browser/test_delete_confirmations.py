"""Browser (Chromium), issue 16: deleting a quota group asks once, on a page that fits a phone, says
what will happen with the numbers, and the delete is in the activity log with its reason; a long node
name on the cluster page is cut with an ellipsis, never overflowing the phone's width."""

from __future__ import annotations

from typing import Any

import pytest

from portal.models import OperatorAction
from quotas.models import QuotaGroup
from quotas.tests.factories import QuotaGroupFactory, make_node

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NO_OVERFLOW = "document.scrollingElement.scrollWidth <= window.innerWidth"


def test_operator_deletes_a_group_on_a_phone_with_a_reason_and_finds_it_in_the_log(
    login: Any, operator: Any
) -> None:
    make_node("inference-node-with-a-rather-long-name-00", pool="inference", gpu_count=4)
    group = QuotaGroupFactory(name="inference", node_selector={"pool": "inference"})
    page = login("operator")
    page.set_viewport_size({"width": 390, "height": 844})

    page.goto(f"/quotas/groups/{group.pk}/")
    page.click("[data-testid=delete-group]")
    assert page.inner_text("[data-testid=impact]") == (
        "What will happen: Group inference and its scheduling queue are removed: its 1 node(s) "
        "with 4 GPU(s) take no work through it any more. No quota or workload is affected. Its "
        "history is kept."
    )
    assert page.evaluate(NO_OVERFLOW)
    page.fill("#id_reason", "inference moved to the new cluster")
    page.click("[data-testid=confirm-button]")
    page.wait_for_url("**/quotas/")
    assert "Group inference deleted." in page.inner_text("ul.messages")
    assert not QuotaGroup.objects.filter(pk=group.pk).exists()
    assert OperatorAction.objects.get().reason == "inference moved to the new cluster"

    page.goto("/operators/activity/?action=quota_group_delete")
    assert "inference moved to the new cluster" in page.inner_text("main")
    assert page.evaluate(NO_OVERFLOW)

    # the long node name: one line, cut, whole in the title, the page no wider than the phone
    page.goto("/cluster/")
    cell = page.locator(".name-cell", has_text="inference-node-with")
    assert cell.get_attribute("title") == "inference-node-with-a-rather-long-name-00"
    assert page.evaluate(NO_OVERFLOW)
