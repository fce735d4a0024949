"""Browser (Chromium): an operator edits a quota with the live what-if preview and inline validation."""

from __future__ import annotations

import pytest

from quotas.models import Quota, QuotaChange
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node, make_workload

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BIG = {"gpu_max_gpu_memory_mib": 10**7, "gpu_max_cpu_milli": 10**6, "gpu_max_memory_mib": 10**8}


def test_operator_edits_a_quota_with_what_if_and_inline_error(login, operator, team_a, team_b):
    # given 8 GPUs shared by team-a (min 1, max 4) and team-b (min 2, max 8), both with pending demand
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=8)
    qa = QuotaFactory(
        group=group, tenant=team_a, gpu_min_gpu_milli=1000, gpu_max_gpu_milli=4000, **BIG
    )
    qb = QuotaFactory(
        group=group, tenant=team_b, gpu_min_gpu_milli=2000, gpu_max_gpu_milli=8000, **BIG
    )
    make_workload(qa, state="pending", gpu_count=4, cpu_milli=0, memory_mib=0)
    make_workload(qb, state="pending", gpu_count=8, cpu_milli=0, memory_mib=0)
    page = login("operator")

    # when the operator opens the tree and the edit form of team-a
    page.goto(f"/quotas/groups/{group.pk}/")
    assert "runtime 2.67 GPUs" in page.inner_text("[data-testid=leaf-team-a]")
    page.click("[data-testid=leaf-team-a] >> text=Edit")
    page.wait_for_selector("#quota-form")

    # and raises the min to 3 GPUs: the what-if shows both siblings before → after (min 3, then the
    # 3 idle GPUs split 4000:8000 by weight: team-a reaches its demand of 4, team-b gets 2 + 2)
    page.fill("#id_gpu_min_gpu_milli", "3")
    page.wait_for_selector("#what-if tr[data-quota=team-a]")
    assert page.inner_text("#what-if tr[data-quota=team-a]").split("\t")[2] == "2.67 GPUs → 4 GPUs"
    assert page.inner_text("#what-if tr[data-quota=team-b]").split("\t")[2] == "5.33 GPUs → 4 GPUs"

    # and types a min above the max: an inline error next to the field, nothing saved
    page.fill("#id_gpu_min_gpu_milli", "9")
    error = page.locator('.field-error.live[data-live-for="gpu_min_gpu_milli"]')
    error.wait_for(state="visible")
    assert error.inner_text() == "Min 9 GPUs is more than max 4 GPUs (GPU side)."
    assert Quota.objects.get(pk=qa.pk).gpu_min_gpu_milli == 1000

    # and submitting it anyway shows the server's inline error
    page.click("[data-testid=save]")
    page.wait_for_selector(".field-error >> text=Min 9 GPUs is more than max 4 GPUs (GPU side).")
    assert QuotaChange.objects.count() == 0

    # when a valid edit is saved
    page.fill("#id_gpu_min_gpu_milli", "3")
    page.fill("#id_note", "team-a needs its GPUs back")
    page.click("[data-testid=save]")

    # then the tree shows the new min and runtime, and the history the change
    page.wait_for_url(f"**/quotas/groups/{group.pk}/")
    leaf = page.inner_text("[data-testid=leaf-team-a]")
    assert "min 3 GPUs" in leaf
    assert "runtime 4 GPUs" in leaf
    history = page.inner_text("[data-testid=history]")
    assert "GPU side min GPU: 1 GPU → 3 GPUs" in history
    assert "team-a needs its GPUs back" in history
    assert "operator" in history
    assert Quota.objects.get(pk=qa.pk).version == 2

    # and the quota page lists the same change
    page.goto(f"/quotas/{qa.pk}/")
    assert "GPU side min GPU: 1 GPU → 3 GPUs" in page.inner_text("[data-testid=history]")
