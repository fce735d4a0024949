"""Browser (Chromium), issue 16: an operator builds a quota group with the node-selector builder and
sees the overlap refused before saving; an operator drains a node with a reason and the developer
whose codespace it moved reads that reason in the codespace's timeline.

Celery is eager in tests (settings_test): the cycle and the codespace observer run when a request
commits; the status sync beat would run is driven from the test."""

from __future__ import annotations

from typing import Any

import pytest

from portal.tests.factories import DEFAULT_PASSWORD
from quotas.models import QuotaGroup
from quotas.tests.factories import QuotaGroupFactory, make_node

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_builds_a_quota_group_and_sees_the_overlap_refused(
    login: Any, operator: Any
) -> None:
    # given training nodes of two models and a batch group holding one L40S node
    make_node("t-h100-0", pool="training", gpu_count=2)
    make_node("t-l40s-0", pool="training", gpu_count=4, gpu_model="L40S")
    make_node("b-l40s-0", pool="batch", gpu_count=1, gpu_model="L40S")
    QuotaGroupFactory(name="batch", node_selector={"pool": "batch"})
    page = login("operator")

    # when the operator builds a group of every L40S node
    page.goto("/quotas/groups/new/")
    assert page.is_hidden("[data-testid=preview-button]")  # the live preview replaces it
    page.fill("#id_name", "l40s")
    page.fill("#id_selector_key_0", "gpu-model")
    assert page.get_attribute("#id_selector_value_0", "list") == "label-values-0"
    page.fill("#id_selector_value_0", "L40S")

    # then the live preview counts the nodes and GPUs, and warns of the batch group's node
    page.wait_for_function(
        "document.querySelector('[data-testid=preview-summary]')?.textContent"
        ".startsWith('Matches 2 nodes and 5 GPUs')"
    )
    assert page.inner_text("[data-testid=preview-summary]") == (
        "Matches 2 nodes and 5 GPUs (5 × L40S)."
    )
    assert "Overlaps group batch on b-l40s-0" in page.inner_text("[data-testid=preview-conflict]")

    # and saving is refused, naming the other group and the node both match
    page.click("[data-testid=save-group]")
    error = page.inner_text("[data-testid=form-error]")
    assert 'as group batch {"pool": "batch"}' in error
    assert "both match b-l40s-0 now" in error
    assert not QuotaGroup.objects.filter(name="l40s").exists()

    # when a second row tells them apart, the preview clears and the group saves
    page.fill("#id_selector_key_1", "pool")
    page.fill("#id_selector_value_1", "training")
    page.wait_for_function(
        "document.querySelector('[data-testid=preview-summary]')?.textContent"
        ".startsWith('Matches 1 node and 4 GPUs')"
    )
    assert page.locator("[data-testid=preview-conflict]").count() == 0
    page.click("[data-testid=save-group]")
    page.wait_for_url("**/quotas/groups/*/")
    assert QuotaGroup.objects.get(name="l40s").node_selector == {
        "gpu-model": "L40S",
        "pool": "training",
    }


def test_operator_drains_a_node_with_a_reason_and_the_developer_reads_it(
    browser: Any, live_server: Any, login: Any, operator: Any, bob: Any, team_a: Any,
    quota_a: Any, template: Any,
) -> None:  # fmt: skip
    from codespaces import services as codespaces
    from codespaces.models import Codespace
    from scheduling.models import Node
    from scheduling.services import reconcile

    # given bob's codespace running on h100-a
    codespace = codespaces.create_codespace(
        user=bob, tenant=team_a, name="bob-dev", template="pytorch", preset="quarter-h100"
    )
    reconcile.sync_status()
    codespace.refresh_from_db()
    assert (codespace.state, codespace.node_name) == ("running", "h100-a")
    node = Node.objects.get(name="h100-a")

    # when the operator opens the drain confirmation from the node page
    page = login("operator")
    page.goto(f"/cluster/nodes/{node.pk}/")
    page.click("[data-testid=drain]")
    assert page.inner_text("[data-testid=impact]") == (
        "What will happen: 1 workload of 1 team will be requeued; 1 codespace will restart "
        "elsewhere. Node h100-a is cordoned: it takes no new work."
    )
    # a drain without a reason is refused on the form, nothing is done
    page.click("[data-testid=confirm-button]")
    assert "reason: A reason is required" in page.inner_text("[data-testid=error-reason]")
    node.refresh_from_db()
    assert node.cordoned is False
    # with a reason it drains, and the node page's audit trail says who, why and what
    page.fill("#id_reason", "kernel upgrade")
    page.click("[data-testid=confirm-button]")
    page.wait_for_url(f"**/cluster/nodes/{node.pk}/")
    audit = page.inner_text("[data-testid=node-audit]")
    assert "kernel upgrade" in audit
    assert "1 workload of 1 team was requeued" in audit
    reconcile.sync_status()

    # then bob reads the operator's reason in his codespace's timeline
    context = browser.new_context(base_url=live_server.url, viewport={"width": 390, "height": 844})
    try:
        dev = context.new_page()
        dev.goto("/accounts/login/")
        dev.fill("#id_username", "bob")
        dev.fill("#id_password", DEFAULT_PASSWORD)
        dev.click("button[type=submit]")
        dev.wait_for_selector("[data-testid=user-menu]")
        dev.goto(f"/codespaces/{Codespace.objects.get(name='bob-dev').pk}/")
        timeline = dev.inner_text("[data-testid=timeline]")
        assert "Moved by operator operator (drain node h100-a): kernel upgrade." in timeline
        assert "Requeued by the scheduler" not in timeline
    finally:
        context.close()
