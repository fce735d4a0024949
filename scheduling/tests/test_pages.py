"""Cluster pages and admin: what each persona sees and may do."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from portal.models import OperatorAction
from scheduling import services
from scheduling.choices import GangState, WorkloadState
from scheduling.models import Gang, Gpu, InvariantAuditRun, Node, Placement, Workload
from scheduling.tasks import audit_invariants_task
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _cluster() -> None:
    small_cluster(gpu_nodes=2, gpus_per_node=4, cpu_nodes=1)


@pytest.fixture
def quota_a(team_a: Any) -> Any:
    return make_quota(make_group(), team_a, name="team-a")


def login(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


def place_slice(quota: Any, name: str = "nb", milli: int = 250) -> Workload:
    w = services.submit_workload(
        tenant=quota.tenant, quota=quota, kind="codespace", name=name,
        cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=milli, gpu_memory_mib=2048,
    )  # fmt: skip
    services.run_cycle(quota.group_id)
    return w


def test_cluster_page_shows_nodes_and_who_holds_each_slice(
    alice: Any, charlie: Any, quota_a: Any
) -> None:
    place_slice(quota_a, "alice-notebook")
    page = login(alice).get("/cluster/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="node-training-g0"' in html
    assert 'data-testid="node-training-c0"' in html
    assert "alice-notebook (team-a): 25 % of the GPU, 2 GiB" in html
    assert 'style="width: 25.0%"' in html
    other = login(charlie).get("/cluster/").content.decode()
    assert "alice-notebook" not in other
    assert "another team (another team): 25 % of the GPU, 2 GiB" in other


def test_cluster_page_filters_by_pool(alice: Any) -> None:
    from scheduling.tests.factories import small_cluster as more

    more("interactive", gpu_nodes=1)
    html = login(alice).get("/cluster/?pool=interactive").content.decode()
    assert "interactive-g0" in html
    assert "training-g0" not in html


def test_node_detail_lists_own_workloads_and_counts_hidden_ones(
    alice: Any, charlie: Any, quota_a: Any
) -> None:
    w = place_slice(quota_a, "alice-notebook")
    node = Placement.objects.get(workload=w).node
    mine = login(alice).get(f"/cluster/nodes/{node.pk}/").content.decode()
    assert "alice-notebook" in mine
    assert "Cordon" not in mine
    theirs = login(charlie).get(f"/cluster/nodes/{node.pk}/").content.decode()
    assert "alice-notebook" not in theirs
    assert "1 more workload of other teams" in theirs


@pytest.mark.parametrize(
    ("_case", "persona", "status"),
    [("admin", "alice", 403), ("member", "bob", 403), ("operator", "operator", 302)],
)
def test_node_actions_need_an_operator(_case: str, persona: str, status: int, request: Any) -> None:
    c = login(request.getfixturevalue(persona))
    node = Node.objects.get(name="training-g0")
    reason = {"reason": "rack maintenance"}
    assert c.post(f"/cluster/nodes/{node.pk}/cordon/", reason).status_code == status
    node.refresh_from_db()
    assert node.cordoned is (status == 302)


def test_operator_drains_a_node_from_the_page(operator: Any, quota_a: Any) -> None:
    w = place_slice(quota_a)
    node = Placement.objects.get(workload=w).node
    r = login(operator).post(
        f"/cluster/nodes/{node.pk}/drain/", {"reason": "kernel upgrade"}, follow=True
    )
    assert "drained: 1 workloads requeued" in r.content.decode()
    w.refresh_from_db()
    node.refresh_from_db()
    assert (w.state, w.pending_reason, node.cordoned) == (
        WorkloadState.PENDING,
        "kernel upgrade",
        True,
    )


def test_a_drain_reason_over_500_characters_is_refused_naming_the_field(
    operator: Any, quota_a: Any
) -> None:
    # issue 15: the reason was silently dropped and the node drained with the default text
    w = place_slice(quota_a)
    node = Placement.objects.get(workload=w).node
    r = login(operator).post(f"/cluster/nodes/{node.pk}/drain/", {"reason": "x" * 501})
    assert r.status_code == 400
    assert "reason: Ensure this value has at most 500 characters (it has 501)." in (
        r.content.decode().replace("&#x27;", "'")
    )
    w.refresh_from_db()
    node.refresh_from_db()
    assert (w.state, node.cordoned) == (WorkloadState.PLACED, False)


def test_operator_fails_a_gpu_from_the_page(operator: Any, quota_a: Any) -> None:
    w = place_slice(quota_a)
    gpu = Placement.objects.get(workload=w).gpu_shares.get().gpu
    r = login(operator).post(f"/cluster/gpus/{gpu.pk}/fail/", follow=True)
    assert "Simulated failure of GPU" in r.content.decode()
    gpu.refresh_from_db()
    w.refresh_from_db()
    assert gpu.healthy is False
    assert w.state == WorkloadState.PENDING
    assert w.pending_code == "gpu_unhealthy"


def test_job_form_submits_a_gang_and_shows_its_pods(alice: Any, quota_a: Any) -> None:
    c = login(alice)
    # typed as a person does: 2 cores, 4 GiB, 100 % of one GPU per pod
    form = {
        "name": "train", "quota": quota_a.pk, "pods": 2, "cpu_milli": "2", "memory_mib": "4",
        "gpu_count": 1, "gpu_milli": "100", "gpu_memory_mib": "0", "timeout_seconds": 600,
        "priority": 0, "preemptible": "on",
    }  # fmt: skip
    r = c.post("/cluster/jobs/", form)
    gang = Gang.objects.get()
    sizes = set(gang.members.values_list("cpu_milli", "memory_mib", "gpu_milli"))
    assert sizes == {(2000, 4096, 1000)}
    assert r.status_code == 302
    assert r["Location"] == f"/cluster/jobs/{gang.pk}/"
    services.run_cycle(quota_a.group_id)
    html = c.get(f"/cluster/jobs/{gang.pk}/").content.decode()
    assert 'data-testid="pod-1"' in html
    assert "training-g" in html
    assert c.post(f"/cluster/jobs/{gang.pk}/cancel/").status_code == 302
    gang.refresh_from_db()
    assert gang.state == GangState.CANCELLED


def test_a_placed_job_no_longer_says_it_waits_for_the_next_cycle(alice: Any, quota_a: Any) -> None:
    # issue 38: running jobs kept "Waiting for the next scheduling cycle." as their reason
    gang = services.submit_gang(
        tenant=quota_a.tenant, quota=quota_a, name="j", owner=alice,
        members=[{"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000}] * 2,
        min_available=2, timeout_seconds=600,
    )  # fmt: skip
    services.run_cycle(quota_a.group_id)
    gang.refresh_from_db()
    assert gang.state in (GangState.PLACED, GangState.RUNNING)
    assert gang.reason == ""
    html = login(alice).get(f"/cluster/jobs/{gang.pk}/").content.decode()
    assert "Waiting for the next scheduling cycle" not in html
    assert 'data-testid="job-reason"' not in html


def test_job_form_shows_service_errors_next_to_the_field(alice: Any, quota_a: Any) -> None:
    form = {
        "name": "bad", "quota": quota_a.pk, "pods": 2, "min_available": 3, "cpu_milli": "0.001",
        "memory_mib": "0.001", "gpu_count": 2, "gpu_milli": "50", "timeout_seconds": 60, "priority": 0,
    }  # fmt: skip
    r = login(alice).post("/cluster/jobs/", form)
    assert r.status_code == 200
    errors = r.context["form"].errors
    assert "min_available" in errors
    assert not Gang.objects.exists()
    assert not Workload.objects.exists()


def test_job_form_refuses_a_slice_with_no_gpu_memory_on_the_field(alice: Any, quota_a: Any) -> None:
    form = {
        "name": "tiny", "quota": quota_a.pk, "pods": 1, "cpu_milli": "1", "memory_mib": "1",
        "gpu_count": 1, "gpu_milli": "50", "gpu_memory_mib": "0", "timeout_seconds": 60,
        "priority": 0,
    }  # fmt: skip
    r = login(alice).post("/cluster/jobs/", form)
    assert r.status_code == 200
    assert r.context["form"].errors == {
        "gpu_memory_mib": ["A slice of a GPU needs some of its memory (at least 1 MiB)."]
    }
    assert not Workload.objects.exists()


def test_job_pages_are_tenant_scoped(alice: Any, charlie: Any, quota_a: Any) -> None:
    gang = services.submit_gang(
        tenant=quota_a.tenant, quota=quota_a, name="j", owner=alice,
        members=[{"cpu_milli": 1, "memory_mib": 1}], min_available=1, timeout_seconds=60,
    )  # fmt: skip
    assert login(charlie).get(f"/cluster/jobs/{gang.pk}/").status_code == 404
    assert login(charlie).post(f"/cluster/jobs/{gang.pk}/cancel/").status_code == 404
    w = gang.members.get()
    assert login(charlie).get(f"/cluster/workloads/{w.pk}/").status_code == 404
    page = login(alice).get(f"/cluster/workloads/{w.pk}/").content.decode()
    assert "Waiting for the next scheduling cycle." in page


@pytest.mark.parametrize(
    "model",
    [
        "node", "gpu", "workload", "gang", "placement", "reservation", "shard", "simulatedpod",
        "invariantauditrun",
    ],
)  # fmt: skip
def test_admin_changelist_and_change_page_load(model: str, operator: Any, quota_a: Any) -> None:
    w = place_slice(quota_a)
    services.submit_gang(
        tenant=quota_a.tenant, quota=quota_a, name="j", owner=None,
        members=[{"cpu_milli": 1, "memory_mib": 1}], min_available=1, timeout_seconds=60,
    )  # fmt: skip
    from scheduling.models import Reservation, Shard, SimulatedPod

    SimulatedPod.objects.get_or_create(
        workload_id=w.pk, defaults={"name": "x", "node_name": "n", "running_after": w.submitted_at}
    )
    Reservation.objects.create(node=Node.objects.first(), cpu_milli=1, memory_mib=1)
    audit_invariants_task()
    c = login(operator)
    assert c.get(f"/admin/scheduling/{model}/").status_code == 200
    objs = {
        "node": Node, "gpu": Gpu, "workload": Workload, "gang": Gang, "placement": Placement,
        "reservation": Reservation, "shard": Shard, "simulatedpod": SimulatedPod,
        "invariantauditrun": InvariantAuditRun,
    }  # fmt: skip
    obj = objs[model].objects.first()
    assert c.get(f"/admin/scheduling/{model}/{obj.pk}/change/").status_code == 200


def test_admin_drain_action_asks_for_the_reason_then_goes_through_the_service(
    operator: Any, quota_a: Any
) -> None:
    w = place_slice(quota_a)
    node = Placement.objects.get(workload=w).node
    client = login(operator)
    selected = {"action": "drain", "_selected_action": [node.pk]}
    page = client.post("/admin/scheduling/node/", selected)
    assert page.status_code == 200
    assert f"{node.name}: 1 workload of 1 team will be requeued" in page.content.decode()
    w.refresh_from_db()
    assert w.state != WorkloadState.PENDING  # asking drains nothing
    r = client.post(
        "/admin/scheduling/node/",
        {**selected, "apply": "1", "reason": "PSU swap in rack 4"},
        follow=True,
    )
    assert r.status_code == 200
    w.refresh_from_db()
    assert w.state == WorkloadState.PENDING
    assert w.pending_code == "drained"
    entry = OperatorAction.objects.get(action="drain")
    assert (entry.reason, entry.actor_name) == ("PSU swap in rack 4", "operator")
