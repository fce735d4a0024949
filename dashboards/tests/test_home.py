"""The home page per persona: each number shown is the one the data gives (codespaces placed through the
real create path on the simulated pool of codespaces/tests/fixtures.py: 2 × H100 80 GiB, 1 × T4)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from codespaces import services as codespace_services
from codespaces.choices import CodespaceState
from codespaces.models import Codespace
from codespaces.tests.factories import CodespaceFactory
from scheduling.models import Gpu, InvariantAuditRun

pytestmark = pytest.mark.django_db


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text_of(html: str, testid: str) -> str:
    """The text inside the element with data-testid=`testid` (tags dropped, spaces collapsed; a <wbr>
    line-break opportunity is no text)."""
    pattern = rf'<(\w+)[^>]*data-testid="{re.escape(testid)}"[^>]*>(.*?)</\1>'
    match = re.search(pattern, html, re.S)
    assert match is not None, f"no element {testid}"
    return " ".join(re.sub(r"<[^>]+>", " ", match[2].replace("<wbr>", "")).split())


@pytest.fixture
def priced(settings: Any) -> None:
    settings.TESSERA_GPU_HOUR_PRICES = "H100=4.0,T4=0.5,default=1.0"


@pytest.fixture
def bobs_quarter(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> Codespace:
    """bob's codespace on a quarter of an H100 (25 % compute, 20 GiB, 2 CPUs, 8 GiB), placed."""
    with django_capture_on_commit_callbacks(execute=True):
        codespace = codespace_services.create_codespace(
            user=bob, tenant=team_a, template=template, name="bob-dev", preset="quarter-h100"
        )
    codespace.refresh_from_db()
    assert codespace.state == CodespaceState.STARTING
    assert codespace.node_name == "h100-a"
    return codespace


@pytest.fixture
def bobs_queued(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    bobs_quarter: Codespace,
    django_capture_on_commit_callbacks: Any,
) -> Codespace:
    """bob's second codespace, 2 whole H100s: over team-a's max of 1 GPU, so it waits."""
    with django_capture_on_commit_callbacks(execute=True):
        codespace = codespace_services.create_codespace(
            user=bob, tenant=team_a, template=template, name="bob-big", preset="2x-h100"
        )
    codespace.refresh_from_db()
    assert codespace.state == CodespaceState.QUEUED
    return codespace


def test_developer_sees_their_codespaces_with_cost_and_what_they_can_start_now(
    bob: Any,
    quota_a: Any,
    template: Any,
    bobs_quarter: Codespace,
    team_a: Any,
    priced: None,
    settings: Any,
) -> None:
    # given bob's placed quarter-H100 codespace and a stopped one
    CodespaceFactory(
        name="bob-old", owner=bob, tenant=team_a, quota=quota_a, template=template,
        state=CodespaceState.STOPPED, gpu_model="H100",
    )  # fmt: skip
    # when bob opens the home page
    html = client_for(bob).get("/").content.decode()
    # then the placed one costs 0.25 GPU × 4.00 per GPU-hour, the stopped one nothing
    # in the configured currency (issue 38: the home page showed costs with no currency)
    settings.TESSERA_CHARGEBACK_CURRENCY = "EUR"
    html = client_for(bob).get("/").content.decode()
    assert text_of(html, "cost-bob-dev") == "1.00 EUR (0.25 GPU × 4.00 EUR per GPU-hour)"
    assert text_of(html, "cost-bob-old") == "0.00 EUR"
    assert "Holding GPUs now costs 1.00 EUR per hour" in text_of(html, "running-cost")
    # and team-a's quota (max 1 GPU, 80 GiB) leaves 0.75 GPU and 60 GiB; the other H100 is free whole
    assert text_of(html, f"start-now-{quota_a.pk}") == (
        "team-a in pool gpu: up to 0.75 GPUs (60 GiB GPU memory); "
        "the largest free slice is 100 % of a GPU with 80 GiB."
    )
    # and a developer sees neither the team admin's nor the operator's parts
    assert 'data-testid="team-team-a"' not in html
    assert 'data-testid="operator-status"' not in html


def test_start_now_agrees_with_the_slice_picker(
    bob: Any, quota_a: Any, template: Any, bobs_quarter: Codespace
) -> None:
    # given the create page's picker headroom for the same quota
    headroom = codespace_services.picker_data(template, quota_a).headroom
    # then the home page shows the same headroom
    html = client_for(bob).get("/").content.decode()
    assert f"up to {headroom['headroom_gpus']:g} GPUs" in text_of(html, f"start-now-{quota_a.pk}")
    assert f"({headroom['headroom_gpu_memory_gib']:g} GiB GPU memory)" in text_of(
        html, f"start-now-{quota_a.pk}"
    )


def test_team_admin_sees_the_team_quota_use_in_human_units_and_pending_requests(
    alice: Any, quota_a: Any, bobs_queued: Codespace
) -> None:
    # given bob's placed quarter H100 and his waiting 2 × H100 in team-a
    # when alice (team-a's admin) opens the home page
    html = client_for(alice).get("/").content.decode()
    # then team-a's quota shows what is in use in GPUs, GiB and CPUs, and the 2 GPUs waiting
    assert text_of(html, f"quota-{quota_a.pk}") == (
        "team-a gpu 0.25 GPUs (guaranteed 1 GPU, max 1 GPU) 20 GiB 2 CPUs 8 GiB 2 GPUs"
    )
    assert text_of(html, "pending-team-a") == "1 pending request"
    assert "bob-big" in text_of(html, "team-team-a")
    assert "milli" not in html
    assert "MiB" not in html


def test_operator_sees_allocation_pending_unhealthy_gpus_and_drift(
    operator: Any, bobs_queued: Codespace
) -> None:
    # given 3 GPUs of which 0.25 is allocated, one request waiting for 2 GPUs, the T4 unhealthy,
    # and an auditor run that found 2 over-committed GPUs and could not check the backend
    Gpu.objects.filter(model="T4").update(healthy=False)
    InvariantAuditRun.objects.create(
        started_at=timezone.now() - timedelta(minutes=5),
        duration_ms=12.0,
        violations=2,
        counts={"gpu_compute": 2, "gpu_memory": 0},
        errors={"backend_objects": "timeout"},
        findings={"gpu_compute": [{"gpu": 1}, {"gpu": 2}]},
    )
    # when the operator opens the home page
    html = client_for(operator).get("/").content.decode()
    # then each tile says what the data says
    assert text_of(html, "cluster-allocation") == (
        "Allocation 8 % 0.25 GPUs allocated of 3 GPUs on 3 nodes."
    )
    assert (
        text_of(html, "cluster-pending") == "Pending 1 request waiting, asking for 2 GPUs in all."
    )
    assert text_of(html, "cluster-unhealthy") == "Unhealthy GPUs 1 t4-a GPU 0 (T4)"
    assert text_of(html, "cluster-drift") == (
        "Drift 2 findings in the invariant auditor's last run (5 minutes ago): "
        "gpu_compute (2), backend_objects (could not run)."
    )
    # and an operator in no team has no developer part
    assert 'data-testid="my-codespaces"' not in html


def test_operator_home_before_the_auditor_ever_ran(operator: Any, gpu_pool: Any) -> None:
    html = client_for(operator).get("/").content.decode()
    assert text_of(html, "cluster-drift") == "Drift — The invariant auditor has not run yet."
    assert text_of(html, "cluster-unhealthy") == "Unhealthy GPUs 0 Every GPU is healthy."
    assert (
        text_of(html, "cluster-pending") == "Pending 0 requests waiting, asking for 0 GPUs in all."
    )


def test_member_of_another_team_sees_nothing_of_team_a(
    charlie: Any, quota_b: Any, bobs_queued: Codespace
) -> None:
    # given bob's codespaces in team-a; when charlie (team-b) opens the home page
    html = client_for(charlie).get("/").content.decode()
    # then none of team-a's codespaces, quota use or requests appear
    assert "bob-dev" not in html
    assert "bob-big" not in html
    assert 'data-testid="team-team-a"' not in html
    assert "You have no codespaces yet." in text_of(html, "my-codespaces")
    assert f'data-testid="start-now-{quota_b.pk}"' in html


def test_home_page_query_count_does_not_grow_with_codespaces(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_assert_max_num_queries: Any
) -> None:
    # given bob with 15 stopped codespaces
    for i in range(15):
        CodespaceFactory(
            name=f"cs-{i}", owner=bob, tenant=team_a, quota=quota_a, template=template,
            state=CodespaceState.STOPPED,
        )  # fmt: skip
    client = client_for(bob)
    # then the home page stays within a fixed number of queries
    with django_assert_max_num_queries(40):
        assert client.get("/").status_code == 200
