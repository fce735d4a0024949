"""Issue 16: safe operator actions. A confirmation says what will happen (computed by the function the
action uses), cordon / drain / mark-unhealthy need a reason, and every action leaves one audit row."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from portal.models import OperatorAction
from scheduling import services
from scheduling.choices import WorkloadState
from scheduling.models import Node, Placement, Workload
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _cluster() -> None:
    small_cluster(gpu_nodes=1, gpus_per_node=4)


def login(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


def submit(quota: Any, name: str, *, kind: str = "codespace", milli: int = 250) -> Workload:
    return services.submit_workload(
        tenant=quota.tenant, quota=quota, kind=kind, name=name,
        cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=milli, gpu_memory_mib=2048,
    )  # fmt: skip


@pytest.fixture
def busy_node(team_a: Any, team_b: Any) -> Node:
    """training-g0 running two codespaces of team-a and one job pod of team-b."""
    group = make_group()
    qa = make_quota(group, team_a, name="team-a")
    qb = make_quota(group, team_b, name="team-b")
    submit(qa, "nb-1")
    submit(qa, "nb-2")
    submit(qb, "train-0", kind="job_pod")
    services.run_cycle(group.pk)
    assert Placement.objects.filter(released_at__isnull=True).count() == 3
    return Node.objects.get(name="training-g0")


def test_drain_confirmation_says_what_will_happen_and_changes_nothing(
    operator: Any, busy_node: Node
) -> None:
    page = login(operator).get(f"/cluster/nodes/{busy_node.pk}/drain/")
    assert page.status_code == 200
    html = page.content.decode()
    assert (
        "3 workloads of 2 teams will be requeued; 2 codespaces will restart elsewhere; "
        "1 job pod will wait for capacity again. Node training-g0 is cordoned: it takes no new work."
    ) in html
    assert "Teams affected: team-a, team-b." in html
    busy_node.refresh_from_db()
    assert busy_node.cordoned is False
    assert not OperatorAction.objects.exists()


@pytest.mark.parametrize(
    ("_case", "reason", "error"),
    [
        ("empty", "", "A reason is required"),
        ("blank", "   ", "A reason is required"),
        ("too long", "x" * 501, "Ensure this value has at most 500 characters (it has 501)."),
    ],
)
def test_drain_without_a_proper_reason_is_a_form_error_naming_reason(
    _case: str, reason: str, error: str, operator: Any, busy_node: Node
) -> None:
    r = login(operator).post(f"/cluster/nodes/{busy_node.pk}/drain/", {"reason": reason})
    assert r.status_code == 400
    html = r.content.decode().replace("&#x27;", "'")
    assert f"reason: {error}" in html
    busy_node.refresh_from_db()
    assert busy_node.cordoned is False
    assert Workload.objects.filter(state=WorkloadState.PLACED).count() == 3
    assert not OperatorAction.objects.exists()


def test_drain_with_a_reason_requeues_what_the_confirmation_counted_and_audits_it(
    operator: Any, busy_node: Node
) -> None:
    c = login(operator)
    r = c.post(f"/cluster/nodes/{busy_node.pk}/drain/", {"reason": " kernel upgrade "})
    assert (r.status_code, r["Location"]) == (302, f"/cluster/nodes/{busy_node.pk}/")
    moved = sorted(
        Workload.objects.filter(state=WorkloadState.PENDING).values_list("pk", flat=True)
    )
    assert len(moved) == 3
    entry = OperatorAction.objects.get()
    assert (entry.actor, entry.action, entry.target_name, entry.node_name, entry.reason) == (
        operator,
        "drain",
        "training-g0",
        "training-g0",
        "kernel upgrade",
    )
    assert entry.impact["workloads"] == moved
    assert entry.impact["teams"] == ["team-a", "team-b"]
    assert sorted(entry.workloads.values_list("workload_id", flat=True)) == moved
    assert set(Workload.objects.values_list("pending_reason", flat=True)) == {"kernel upgrade"}
    # and the node page shows the audit row to operators
    html = c.get(f"/cluster/nodes/{busy_node.pk}/").content.decode()
    assert html.count('data-testid="node-audit"') == 1
    # issue 38: the node page's GPU bars had no legend
    assert html.count('data-testid="bar-legend"') == 1
    assert "grey is free" in html
    assert "kernel upgrade" in html
    assert "3 workloads of 2 teams were requeued" in html


def test_mark_gpu_unhealthy_needs_a_reason_and_counts_only_that_gpu(
    operator: Any, busy_node: Node
) -> None:
    gpu = busy_node.gpus.get(index=0)
    on_it = sorted(
        Placement.objects.filter(released_at__isnull=True, gpu_shares__gpu=gpu).values_list(
            "workload_id", flat=True
        )
    )
    c = login(operator)
    refused = c.post(f"/cluster/gpus/{gpu.pk}/unhealthy/", {"reason": ""})
    assert refused.status_code == 400
    gpu.refresh_from_db()
    assert gpu.healthy is True
    done = c.post(f"/cluster/gpus/{gpu.pk}/unhealthy/", {"reason": "ECC errors"})
    assert done.status_code == 302
    gpu.refresh_from_db()
    entry = OperatorAction.objects.get()
    assert (gpu.healthy, entry.action, entry.reason, entry.impact["workloads"]) == (
        False,
        "gpu_unhealthy",
        "ECC errors",
        on_it,
    )


def test_api_drain_dry_run_answers_the_impact_and_changes_nothing(
    operator: Any, busy_node: Node, api_as: Any
) -> None:
    client = api_as(operator)
    r = client.post(f"/api/v1/nodes/{busy_node.pk}/drain/?dry_run=1", {}, format="json")
    assert r.status_code == 200
    body = r.json()
    ids = sorted(Workload.objects.values_list("pk", flat=True))
    assert body == {
        "dry_run": True,
        "action": "drain",
        "impact": {
            "summary": (
                "3 workloads of 2 teams will be requeued; 2 codespaces will restart elsewhere; "
                "1 job pod will wait for capacity again. Node training-g0 is cordoned: it takes "
                "no new work."
            ),
            "workloads": ids,
            "teams": ["team-a", "team-b"],
            "codespaces": 2,
            "jobs": 1,
        },
    }
    busy_node.refresh_from_db()
    assert busy_node.cordoned is False
    assert not OperatorAction.objects.exists()


@pytest.mark.parametrize(
    ("_case", "path", "body", "field"),
    [
        ("cordon without reason", "nodes/{node}/cordon/", {}, "reason"),
        ("drain with blank reason", "nodes/{node}/drain/", {"reason": "  "}, "reason"),
        ("unhealthy without reason", "gpus/{gpu}/health/", {"healthy": False}, "reason"),
        ("bad dry_run", "nodes/{node}/drain/?dry_run=maybe", {"reason": "x"}, "dry_run"),
    ],
)
def test_api_operator_action_refusals_are_400_naming_the_field(
    _case: str, path: str, body: dict[str, Any], field: str, operator: Any, busy_node: Node,
    api_as: Any,
) -> None:  # fmt: skip
    gpu = busy_node.gpus.get(index=0)
    url = "/api/v1/" + path.format(node=busy_node.pk, gpu=gpu.pk)
    r = api_as(operator).post(url, body, format="json")
    assert r.status_code == 400
    assert list(r.json()["error"]["fields"]) == [field]
    busy_node.refresh_from_db()
    gpu.refresh_from_db()
    assert (busy_node.cordoned, gpu.healthy) == (False, True)
    assert Workload.objects.filter(state=WorkloadState.PLACED).count() == 3
    assert not OperatorAction.objects.exists()


def test_api_cordon_with_a_reason_is_audited(operator: Any, busy_node: Node, api_as: Any) -> None:
    r = api_as(operator).post(
        f"/api/v1/nodes/{busy_node.pk}/cordon/", {"reason": "rack move"}, format="json"
    )
    assert (r.status_code, r.json()["cordoned"]) == (200, True)
    entry = OperatorAction.objects.get()
    assert (entry.action, entry.reason, entry.summary) == (
        "cordon",
        "rack move",
        "Node training-g0 was cordoned; the 3 workloads running there kept running.",
    )


def test_a_drained_jobs_page_names_the_operator_and_reason(
    operator: Any, team_b: Any, busy_node: Node
) -> None:
    # given team-b's job pod on the node; its gang
    pod = Workload.objects.get(name="train-0")
    gang = services.submit_gang(
        tenant=team_b, quota=pod.quota, name="train", owner=None, min_available=1, timeout_seconds=600,
        members=[{"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 250,
                  "gpu_memory_mib": 4096}],
    )  # fmt: skip
    services.run_cycle(pod.quota.group_id)
    member = gang.members.get()
    assert member.state == WorkloadState.PLACED
    # when an operator drains the node
    services.drain_node(busy_node.pk, reason="kernel upgrade", actor=operator)
    # then the job's page says who moved it and why
    html = login(operator).get(f"/cluster/jobs/{gang.pk}/").content.decode()
    assert (
        f"Moved by operator {operator.get_username()} (drain node training-g0): kernel upgrade."
    ) in html


def test_cancelling_a_job_asks_once_saying_what_stops(alice: Any, busy_node: Node) -> None:
    pod = Workload.objects.get(name="nb-1")
    gang = services.submit_gang(
        tenant=pod.tenant, quota=pod.quota, name="train", owner=alice, min_available=2,
        timeout_seconds=600, members=[{"cpu_milli": 1000, "memory_mib": 1024}] * 2,
    )  # fmt: skip
    services.run_cycle(pod.quota.group_id)
    c = login(alice)
    html = c.get(f"/cluster/jobs/{gang.pk}/").content.decode()
    assert f'href="/cluster/jobs/{gang.pk}/cancel/"' in html
    page = c.get(f"/cluster/jobs/{gang.pk}/cancel/")
    assert page.status_code == 200
    assert (
        "Job train is cancelled: its 2 pods stop for good (2 placed now release what they hold)."
    ) in page.content.decode()
    gang.refresh_from_db()
    assert gang.state != "cancelled"
    assert c.post(f"/cluster/jobs/{gang.pk}/cancel/").status_code == 302
    gang.refresh_from_db()
    assert gang.state == "cancelled"
