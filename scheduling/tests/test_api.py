"""Scheduling API: inventory, operator actions, workloads/placements scoping and gang jobs, per persona."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling import services
from scheduling.choices import GangState, WorkloadState
from scheduling.inventory import sync_inventory_rows
from scheduling.models import Gang, Gpu, Node, Placement, Workload
from scheduling.tests.factories import gpu_node, make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _cluster() -> None:
    small_cluster(gpu_nodes=2, gpus_per_node=4)


@pytest.fixture
def quota_a(team_a: Any) -> Any:
    return make_quota(make_group(), team_a, name="team-a")


@pytest.fixture
def quota_b(team_b: Any) -> Any:
    return make_quota(make_group(), team_b, name="team-b")


def personas(request: Any, name: str) -> Any:
    return request.getfixturevalue(name)


JOB: dict[str, Any] = {
    "name": "train",
    "pods": 2,
    "member": {"cpu_milli": 2000, "memory_mib": 4096, "gpu_count": 1},
    "timeout_seconds": 120,
}


def test_job_submit_places_all_pods_and_shows_each_member(
    alice: Any, quota_a: Any, api_as: Any, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        r = api_as(alice).post("/api/v1/jobs/", JOB, format="json")
    assert r.status_code == 201, r.json()
    job = api_as(alice).get(f"/api/v1/jobs/{r.json()['id']}/").json()
    assert job["pods"] == 2
    assert job["min_available"] == 2
    assert job["tenant"] == "team-a"
    assert job["owner"] == "alice"
    assert [m["state"] for m in job["members"]] in (
        [WorkloadState.PLACED] * 2,
        [WorkloadState.RUNNING] * 2,
    )
    assert all(m["placement"]["gpus"][0]["gpu_milli"] == 1000 for m in job["members"])
    assert job["state"] in (GangState.PLACED, GangState.RUNNING)


@pytest.mark.parametrize(
    ("_case", "body", "field"),
    [
        ("no pods", {**JOB, "pods": 0}, "pods"),
        ("min above pods", {**JOB, "min_available": 3}, "min_available"),
        ("slice on 2 gpus", {**JOB, "member": {**JOB["member"], "gpu_count": 2, "gpu_milli": 500}},
         "members[0].gpu_milli"),
        ("bad name", {**JOB, "name": "Bad Name"}, "name"),
        ("MIG profile in a slice pool", {**JOB, "member": {**JOB["member"], "mig_profile": "1g.10gb"}},
         "mig_profile"),
        ("MIG profile of 17 characters", {**JOB, "member": {**JOB["member"], "mig_profile": "1" * 17}},
         "mig_profile"),
        ("not a MIG profile", {**JOB, "member": {**JOB["member"], "mig_profile": "9g.1tb"}},
         "mig_profile"),
        ("a slice with no GPU memory", {**JOB, "member": {**JOB["member"], "gpu_milli": 500,
         "gpu_memory_mib": 0}}, "gpu_memory_mib"),
    ],
)  # fmt: skip
def test_job_submit_rejects_bad_input_with_400_and_writes_nothing(
    _case: str, body: dict[str, Any], field: str, alice: Any, quota_a: Any, api_as: Any
) -> None:
    r = api_as(alice).post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400
    err = r.json()["error"]
    assert field in err["fields"] or field.split(".")[0] in str(err["fields"])
    assert not Gang.objects.exists()
    assert not Workload.objects.exists()


def _member(**changes: Any) -> dict[str, Any]:
    return {**JOB, "member": {**JOB["member"], **changes}}


@pytest.mark.parametrize(
    ("_case", "body", "field", "message"),
    [
        ("2,000 node labels", _member(node_labels={f"k{i}": "v" for i in range(2000)}),
         "members[0].node_labels", "At most 32 node labels (got 2000)."),
        ("label name of 64 characters", _member(node_labels={"k" * 64: "v"}),
         "members[0].node_labels", f"Label {'k' * 64!r}: the name after the prefix has at most 63 "
         "characters (got 64)."),
        ("label prefix of 254 characters", _member(node_labels={"a" * 254 + "/zone": "v"}),
         "members[0].node_labels", "Label prefix " + repr("a" * 254) + ": a DNS subdomain of at "
         "most 253 characters (got 254)."),
        ("label value of 64 characters", _member(node_labels={"zone": "v" * 64}),
         "members[0].node_labels", "Label 'zone': the value has at most 63 characters (got 64)."),
        ("label name with a space", _member(node_labels={"my zone": "a"}),
         "members[0].node_labels", "Label 'my zone': a name is letters, digits, '-', '_' and '.', "
         "starting and ending with a letter or digit."),
        ("GPU model of 10,000 characters", _member(gpu_models=["A" * 10_000]),
         "members[0].gpu_models", "A GPU model name has at most 63 characters (got 10000)."),
    ],
)  # fmt: skip
def test_job_submit_bounds_labels_and_model_names_like_kubernetes(
    _case: str,
    body: dict[str, Any],
    field: str,
    message: str,
    alice: Any,
    quota_a: Any,
    api_as: Any,
) -> None:
    # issue 12: a 208 KB job with 2,000 node labels slowed every cycle of its pool 30-fold
    r = api_as(alice).post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400
    assert r.json()["error"]["fields"] == {field: [message]}
    assert not Gang.objects.exists()
    assert not Workload.objects.exists()


def test_job_submit_accepts_prefixed_kubernetes_labels(
    alice: Any, quota_a: Any, api_as: Any
) -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "pool": "training"}
    Node.objects.filter(name="training-g0").update(labels=labels)
    r = api_as(alice).post("/api/v1/jobs/", _member(node_labels=labels), format="json")
    assert r.status_code == 201, r.json()
    assert Workload.objects.filter(node_labels=labels).count() == 2


@pytest.mark.parametrize(
    ("_case", "body", "field", "message"),
    [
        ("more GPUs than the pool", {**JOB, "pods": 3, "member": {**JOB["member"], "gpu_count": 4}},
         "pods", "The job needs 3 pods × 4 GPUs = 12 GPUs placed together; pool training has 8."),
        ("min_available beyond the pool", {**JOB, "pods": 4, "min_available": 3,
                                           "member": {**JOB["member"], "gpu_count": 4}},
         "min_available",
         "The job needs 3 pods × 4 GPUs = 12 GPUs placed together; pool training has 8."),
        ("more GPUs per pod than any node", _member(gpu_count=8), "members[0].gpu_count",
         "Each pod needs 8 GPUs on one node; the largest node of pool training has 4."),
        ("more CPU per pod than any node", _member(cpu_milli=64000), "members[0].cpu_milli",
         "Each pod needs 64000 milli-CPU on one node; the largest node of pool training has 32000."),
        ("more memory per pod than any node", _member(memory_mib=200_000), "members[0].memory_mib",
         "Each pod needs 200000 MiB of memory on one node; the largest node of pool training has "
         "131072."),
        ("labels no node has", _member(node_labels={"zone": "mars"}), "members[0].node_labels",
         "No node of pool training has the labels zone=mars."),
    ],
)  # fmt: skip
def test_job_that_can_never_fit_its_pool_is_refused_at_submit_with_the_numbers(
    _case: str,
    body: dict[str, Any],
    field: str,
    message: str,
    alice: Any,
    quota_a: Any,
    api_as: Any,
) -> None:
    # issue 12: 512 pods x 16 GPUs in an 80-GPU pool used to wait forever
    r = api_as(alice).post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400, r.json()
    error = r.json()["error"]
    assert (error["code"], error["fields"]) == ("never_fits", {field: [message]})
    assert not Gang.objects.exists()
    assert not Workload.objects.exists()


def test_job_naming_a_gpu_model_only_another_pool_has_can_never_fit_and_is_refused(
    alice: Any, quota_a: Any, api_as: Any
) -> None:
    sync_inventory_rows([gpu_node("h100-x", "H100", 80, pool="inference")])
    r = api_as(alice).post("/api/v1/jobs/", _member(gpu_models=["H100"]), format="json")
    assert r.status_code == 400, r.json()
    error = r.json()["error"]
    assert (error["code"], error["fields"]) == (
        "never_fits",
        {
            "members[0].gpu_models": [
                "No node of pool training has a GPU of model H100 (it has: A100)."
            ]
        },
    )


@pytest.mark.parametrize(
    "models",
    [['=HYPERLINK("http://evil","x")'], ["A100", "H200-typo"]],
)
def test_job_naming_a_gpu_model_the_inventory_does_not_have_is_refused_at_submit(
    models: list[str], alice: Any, quota_a: Any, api_as: Any
) -> None:
    # issue 38: an unknown model name was stored (and exported) even when another named model fit
    for member in (_member(gpu_models=models), _member(gpu_models=models, gpu_count=0)):
        r = api_as(alice).post("/api/v1/jobs/", member, format="json")
        assert r.status_code == 400, r.json()
        unknown = [m for m in models if m != "A100"]
        assert r.json()["error"]["fields"] == {
            "members[0].gpu_models": [f"Unknown GPU model {unknown[0]!r}: the inventory has A100."]
        }
    assert not Workload.objects.exists()


def test_job_submit_refuses_quota_of_another_team(
    alice: Any, quota_a: Any, quota_b: Any, api_as: Any
) -> None:
    r = api_as(alice).post("/api/v1/jobs/", {**JOB, "quota": quota_b.pk}, format="json")
    assert r.status_code == 400
    assert "quota" in r.json()["error"]["fields"]
    assert not Gang.objects.exists()


@pytest.mark.parametrize(
    ("_case", "persona", "status", "cancelled"),
    [
        ("owner", "alice", 200, True),
        ("member not owner", "bob", 403, False),
        ("other team", "charlie", 404, False),
        ("operator", "operator", 200, True),
    ],
)
def test_job_cancel_authorization(
    _case: str, persona: str, status: int, cancelled: bool, request: Any, quota_a: Any, api_as: Any
) -> None:
    alice = request.getfixturevalue("alice")
    user = request.getfixturevalue(persona)
    gang = services.submit_gang(
        tenant=quota_a.tenant, quota=quota_a, name="j", owner=alice,
        members=[JOB["member"] | {"gpu_milli": 1000}], min_available=1, timeout_seconds=60,
    )  # fmt: skip
    services.run_cycle(quota_a.group_id)
    r = api_as(user).post(f"/api/v1/jobs/{gang.pk}/cancel/")
    assert r.status_code == status
    gang.refresh_from_db()
    assert (gang.state == GangState.CANCELLED) is cancelled
    assert Placement.objects.filter(released_at__isnull=True).exists() is not cancelled


@pytest.mark.parametrize(
    ("_case", "persona", "sees"),
    [
        ("admin", "alice", 1),
        ("member", "bob", 1),
        ("other team", "charlie", 0),
        ("operator", "operator", 1),
    ],
)
def test_workloads_and_placements_are_tenant_scoped(
    _case: str, persona: str, sees: int, request: Any, quota_a: Any, api_as: Any
) -> None:
    user = request.getfixturevalue(persona)
    w = services.submit_workload(
        tenant=quota_a.tenant, quota=quota_a, kind="job_pod", name="w",
        cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=300, gpu_memory_mib=4096,
    )  # fmt: skip
    services.run_cycle(quota_a.group_id)
    client = api_as(user)
    assert len(client.get("/api/v1/workloads/").json()["results"]) == sees
    assert len(client.get("/api/v1/placements/?active=true").json()["results"]) == sees
    detail = client.get(f"/api/v1/workloads/{w.pk}/")
    assert detail.status_code == (200 if sees else 404)
    if sees:
        assert detail.json()["placement"]["gpus"][0]["gpu_milli"] == 300


def test_gpu_shares_hide_other_teams_names(
    charlie: Any, alice: Any, quota_a: Any, api_as: Any
) -> None:
    services.submit_workload(
        tenant=quota_a.tenant, quota=quota_a, kind="codespace", name="secret-notebook",
        cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=250, gpu_memory_mib=1000,
    )  # fmt: skip
    services.run_cycle(quota_a.group_id)
    gpu_id = Placement.objects.get().gpu_shares.get().gpu_id
    theirs = api_as(charlie).get(f"/api/v1/gpus/{gpu_id}/").json()
    ours = api_as(alice).get(f"/api/v1/gpus/{gpu_id}/").json()
    assert theirs["shares"] == [
        {"workload": None, "name": "another team", "tenant": "another team",
         "gpu_milli": 250, "gpu_memory_mib": 1000, "mig_profile": "", "mig_start": None}
    ]  # fmt: skip
    assert ours["shares"][0]["name"] == "secret-notebook"
    assert ours["used_milli"] == 250
    node = api_as(charlie).get(f"/api/v1/nodes/{Gpu.objects.get(pk=gpu_id).node_id}/").json()
    assert "secret-notebook" not in str(node)


@pytest.mark.parametrize(
    ("_case", "persona", "status"),
    [
        ("admin", "alice", 403),
        ("member", "bob", 403),
        ("other", "charlie", 403),
        ("operator", "operator", 200),
    ],
)
def test_operator_actions_are_for_operators_only(
    _case: str, persona: str, status: int, request: Any, api_as: Any
) -> None:
    client = api_as(request.getfixturevalue(persona))
    node = Node.objects.get(name="training-g0")
    gpu = node.gpus.get(index=0)
    why = {"reason": "rack maintenance"}
    assert client.post(f"/api/v1/nodes/{node.pk}/cordon/", why, format="json").status_code == status
    node.refresh_from_db()
    assert node.cordoned is (status == 200)
    r = client.post(f"/api/v1/gpus/{gpu.pk}/health/", {"healthy": False, **why}, format="json")
    assert r.status_code == status
    gpu.refresh_from_db()
    assert gpu.healthy is (status != 200)
    assert client.post(f"/api/v1/nodes/{node.pk}/drain/", why, format="json").status_code == status
    assert client.post(f"/api/v1/nodes/{node.pk}/uncordon/").status_code == status


def test_everyone_signed_in_reads_the_inventory(bob: Any, api_as: Any, api_client: Any) -> None:
    nodes = api_as(bob).get("/api/v1/nodes/").json()["results"]
    assert [n["name"] for n in nodes] == ["training-g0", "training-g1"]
    assert nodes[0]["gpu_count"] == 4
    assert nodes[0]["schedulable"] is True
    assert api_client.get("/api/v1/nodes/").status_code in (401, 403)


def test_fail_gpu_via_api_requeues_exactly_its_workloads(
    operator: Any, quota_a: Any, api_as: Any
) -> None:
    ws = [
        services.submit_workload(
            tenant=quota_a.tenant,
            quota=quota_a,
            kind="job_pod",
            name=f"w{i}",
            cpu_milli=1000,
            memory_mib=1024,
            gpu_count=1,
            gpu_milli=500,
            gpu_memory_mib=4096,
        )  # fmt: skip
        for i in range(6)
    ]
    services.run_cycle(quota_a.group_id)
    gpu_id = Placement.objects.filter(workload=ws[0]).get().gpu_shares.get().gpu_id
    on_it = sorted(
        Placement.objects.filter(released_at__isnull=True, gpu_shares__gpu_id=gpu_id).values_list(
            "workload_id", flat=True
        )
    )
    r = api_as(operator).post(f"/api/v1/gpus/{gpu_id}/fail/")
    assert r.status_code == 200
    assert r.json()["requeued"] == on_it
    states = dict(Workload.objects.values_list("pk", "state"))
    assert {pk for pk, s in states.items() if s == WorkloadState.PENDING} == set(on_it)


# --- issue item 5: a slice never lands on a whole-card-only model ---------------------------------


@pytest.fixture
def t4_and_l40s_pool(settings: Any) -> None:
    """Next to the A100s: a T4 node (whole cards only on this cluster) and an L40S node."""
    from scheduling.inventory import sync_inventory_rows
    from scheduling.tests.factories import gpu_node

    settings.TESSERA_WHOLE_CARD_ONLY_GPU_MODELS = ["T4"]
    Node.objects.all().delete()
    sync_inventory_rows(
        [gpu_node("t4-a", "T4", 16, gpus=2), gpu_node("l40s-a", "L40S", 48, gpus=1)]
    )


SLICE_JOB: dict[str, Any] = {
    "name": "tune",
    "pods": 1,
    "member": {
        "cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 500,
        "gpu_memory_mib": 4096,
    },
    "timeout_seconds": 120,
}  # fmt: skip


def test_job_slice_without_model_is_restricted_to_models_that_allow_slices(
    alice: Any,
    quota_a: Any,
    api_as: Any,
    t4_and_l40s_pool: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given the only L40S card is taken whole, the two T4s are free
    services.submit_workload(
        tenant=quota_a.tenant, quota=quota_a, kind="job_pod", name="hold-l40s",
        cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=1000, gpu_models=["L40S"],
    )  # fmt: skip
    services.run_cycle(quota_a.group_id)
    # when a half-card job with no model is submitted
    with django_capture_on_commit_callbacks(execute=True):
        r = api_as(alice).post("/api/v1/jobs/", SLICE_JOB, format="json")
    # then it is accepted restricted to the L40S, and waits rather than landing on a T4
    assert r.status_code == 201, r.json()
    member = Workload.objects.get(gang_id=r.json()["id"])
    assert member.gpu_models == ["L40S"]
    assert member.state == WorkloadState.PENDING
    assert not Placement.objects.filter(workload=member).exists()


def test_job_slice_is_refused_when_the_pool_has_no_model_that_allows_slices(
    alice: Any, quota_a: Any, api_as: Any, t4_and_l40s_pool: None
) -> None:
    # given a pool of T4s (whole cards only) and an L40S
    Node.objects.filter(name="l40s-a").delete()
    # when a slice job is submitted without a model, or on the T4
    r_any = api_as(alice).post("/api/v1/jobs/", SLICE_JOB, format="json")
    on_t4 = {**SLICE_JOB, "member": {**SLICE_JOB["member"], "gpu_models": ["T4"]}}
    r_t4 = api_as(alice).post("/api/v1/jobs/", on_t4, format="json")
    # then both are a 400 naming gpu_models and the reason, and nothing is written
    for r in (r_any, r_t4):
        assert r.status_code == 400, r.json()
        reason = str(r.json()["error"]["fields"]["members[0].gpu_models"])
        assert "T4" in reason
        assert "whole cards" in reason
    assert not Gang.objects.exists()
    assert not Workload.objects.exists()


def test_api_drain_stores_the_reason_and_refuses_one_over_500_characters(
    operator: Any, quota_a: Any, api_as: Any
) -> None:
    # issue 15: a drain reason is kept whole or refused with the bound, never dropped
    w = services.submit_workload(
        tenant=quota_a.tenant, quota=quota_a, kind="codespace", name="w",
        cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=1000,
    )  # fmt: skip
    services.run_cycle(quota_a.group_id)
    node = Placement.objects.get(workload=w).node
    client = api_as(operator)
    refused = client.post(f"/api/v1/nodes/{node.pk}/drain/", {"reason": "x" * 501}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {
        "reason": ["Ensure this field has no more than 500 characters."]
    }
    node.refresh_from_db()
    assert node.cordoned is False
    done = client.post(f"/api/v1/nodes/{node.pk}/drain/", {"reason": "y" * 500}, format="json")
    assert (done.status_code, done.json()) == (200, {"requeued": [w.pk]})
    w.refresh_from_db()
    assert (w.state, w.pending_reason) == (WorkloadState.PENDING, "y" * 500)
