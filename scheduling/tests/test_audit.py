"""The invariant auditor: each invariant reports a row that breaks it (made directly in the database),
a consistent database reports nothing; `manage.py audit`, the periodic task, the operators' page and
the /metrics gauges."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from codespaces.choices import CodespaceState
from codespaces.tests.factories import CodespaceFactory
from scheduling import services
from scheduling.choices import GangState, WorkloadState
from scheduling.models import (
    Gang,
    InvariantAuditRun,
    Node,
    Placement,
    PlacementGpu,
    SimulatedPod,
    Workload,
)
from scheduling.services import audit
from scheduling.tasks import audit_invariants_task
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db

NO_GRACE = timedelta(0)
LATER = timedelta(minutes=10)


def submit(quota: Any, name: str, **kw: Any) -> Workload:
    kw.setdefault("cpu_milli", 1000)
    kw.setdefault("memory_mib", 1024)
    return services.submit_workload(
        tenant=quota.tenant, quota=quota, kind=kw.pop("kind", "job_pod"), name=name, **kw
    )


def findings(name: str, *, later: bool = True) -> list[dict[str, Any]]:
    """The findings of one invariant, audited as if `LATER` had passed (so grace has run out)."""
    now = timezone.now() + (LATER if later else timedelta(0))
    report = audit.run_audit(now=now, only=[name])
    result = report.result(name)
    assert result.error == ""
    return list(result.findings)


@pytest.fixture
def quota(db: Any) -> Any:
    small_cluster(gpu_nodes=1, gpus_per_node=2, cpu_nodes=1)
    return make_quota(make_group())


@pytest.fixture
def placed(quota: Any, django_capture_on_commit_callbacks: Any) -> Workload:
    """A slice workload placed by a real cycle and materialized on the simulated cluster."""
    with django_capture_on_commit_callbacks(execute=True):
        workload = submit(quota, "nb", gpu_count=1, gpu_milli=500, gpu_memory_mib=10240)
    workload.refresh_from_db()
    assert workload.state in (WorkloadState.PLACED, WorkloadState.RUNNING)
    assert SimulatedPod.objects.filter(workload_id=workload.pk).exists()
    return workload


def add_share(placed: Workload, *, gpu_milli: int, gpu_memory_mib: int) -> Placement:
    """Another active placement on the same GPU as `placed`, written past the scheduler."""
    other = submit(
        placed.quota, "intruder", gpu_count=1, gpu_milli=gpu_milli, gpu_memory_mib=gpu_memory_mib
    )
    Workload.objects.filter(pk=other.pk).update(state=WorkloadState.PLACED)
    share = PlacementGpu.objects.get(placement__workload=placed, placement__released_at=None)
    placement = Placement.objects.create(
        workload=other,
        node_id=share.placement.node_id,
        tenant=other.tenant,
        cpu_milli=1000,
        memory_mib=1024,
        gpu_milli_total=gpu_milli,
    )
    PlacementGpu.objects.create(
        placement=placement, gpu=share.gpu, gpu_milli=gpu_milli, gpu_memory_mib=gpu_memory_mib
    )
    return placement


def test_a_consistent_database_reports_no_violation(placed: Workload, quota: Any, bob: Any) -> None:
    # given a placed slice, a job waiting with its reason and a codespace following its workload
    submit(quota, "huge", gpu_count=4, gpu_milli=1000)
    services.run_cycle(quota.group_id)
    assert Workload.objects.get(name="huge").pending_reason != ""
    following = CodespaceState.RUNNING if placed.state == WorkloadState.RUNNING else "starting"
    CodespaceFactory(owner=bob, tenant=quota.tenant, quota=quota, workload=placed, state=following)
    # when the auditor runs (long after every change)
    report = audit.run_audit(now=timezone.now() + LATER)
    # then every invariant is checked and holds
    assert [(r.name, r.status) for r in report.results] == [
        (name, "ok") for name in audit.INVARIANT_NAMES
    ]
    assert report.violations == 0


def test_gpu_compute_overcommit_is_reported(placed: Workload) -> None:
    # given a second share of 600 milli on the GPU that already holds 500
    add_share(placed, gpu_milli=600, gpu_memory_mib=1024)
    # then the GPU is reported with both numbers
    gpu = PlacementGpu.objects.get(placement__workload=placed).gpu
    assert findings("gpu_compute") == [
        {
            "gpu_id": gpu.pk,
            "gpu": f"{gpu.node.name}/gpu{gpu.index}",
            "uuid": gpu.uuid,
            "shares": 2,
            "used_milli": 1100,
            "capacity_milli": 1000,
        }
    ]


def test_gpu_memory_overcommit_is_reported(placed: Workload) -> None:
    # given a second share whose memory overflows the card (40960 MiB) together with 10240
    add_share(placed, gpu_milli=100, gpu_memory_mib=40000)
    gpu = PlacementGpu.objects.get(placement__workload=placed).gpu
    assert [
        (f["gpu_id"], f["used_memory_mib"], f["capacity_memory_mib"])
        for f in findings("gpu_memory")
    ] == [(gpu.pk, 50240, 40960)]
    assert findings("gpu_compute") == []


def test_node_cpu_overcommit_is_reported(placed: Workload) -> None:
    # given the node's CPU shrinks below what its placement holds
    placement = Placement.objects.get(workload=placed, released_at=None)
    Node.objects.filter(pk=placement.node_id).update(cpu_milli=500)
    assert findings("node_capacity") == [
        {
            "node_id": placement.node_id,
            "node": placement.node.name,
            "rule": "capacity",
            "used_cpu_milli": 1000,
            "capacity_cpu_milli": 500,
            "used_memory_mib": 1024,
            "capacity_memory_mib": 131072,
        }
    ]


def test_cpu_only_work_in_a_gpu_nodes_reservation_is_reported(quota: Any) -> None:
    # given a CPU-only placement on the GPU node using 90% of its CPU (25% is kept for GPU work)
    gpu_node = Node.objects.get(name="training-g0")
    workload = submit(quota, "cpu-hog", cpu_milli=28800, memory_mib=1024)
    Workload.objects.filter(pk=workload.pk).update(state=WorkloadState.PLACED)
    Placement.objects.create(
        workload=workload, node=gpu_node, tenant=quota.tenant, cpu_milli=28800, memory_mib=1024
    )
    rows = findings("node_capacity")
    assert rows == [
        {
            "node_id": gpu_node.pk,
            "node": "training-g0",
            "rule": "reservation",
            "cpu_only_cpu_milli": 28800,
            "cpu_only_limit_cpu_milli": 24000,
            "cpu_only_memory_mib": 1024,
            "cpu_only_limit_memory_mib": 98304,
        }
    ]


@pytest.mark.parametrize(
    ("_case", "state", "release", "expected"),
    [
        ("placed workload without placement", WorkloadState.PLACED, True, (0, 1)),
        ("released workload still placed", WorkloadState.RELEASED, False, (1, 0)),
    ],
)
def test_workload_and_placement_disagreeing_is_reported(
    placed: Workload, _case: str, state: str, release: bool, expected: tuple[int, int]
) -> None:
    Workload.objects.filter(pk=placed.pk).update(state=state)
    if release:
        Placement.objects.filter(workload=placed).update(released_at=timezone.now())
    rows = findings("one_placement")
    assert [
        (r["workload_id"], r["state"], r["active_placements"], r["expected"]) for r in rows
    ] == [(placed.pk, state, *expected)]


def test_quota_usage_differing_from_placements_is_reported(placed: Workload) -> None:
    # given a placement holding a whole card's memory and 2000m CPU while the request says 10240 / 1000
    Placement.objects.filter(workload=placed).update(cpu_milli=2000)
    PlacementGpu.objects.filter(placement__workload=placed).update(gpu_memory_mib=40960)
    rows = findings("quota_usage")
    assert [(r["quota_id"], r["side"], r["dimension"], r["used"], r["placed"]) for r in rows] == [
        (placed.quota_id, "gpu", "gpu_memory_mib", 10240, 40960),
        (placed.quota_id, "gpu", "cpu_milli", 1000, 2000),
    ]


def test_partially_placed_gang_is_reported(quota: Any) -> None:
    # given a gang of 2 (min 2) where only one member holds a placement
    gang = Gang.objects.create(
        name="train", tenant=quota.tenant, quota=quota, min_available=2, state=GangState.PLACED
    )
    first = submit(quota, "train-0", gang=gang)
    submit(quota, "train-1", gang=gang)
    Workload.objects.filter(pk=first.pk).update(state=WorkloadState.PLACED)
    Placement.objects.create(
        workload=first,
        node=Node.objects.get(name="training-c0"),
        tenant=quota.tenant,
        cpu_milli=1000,
        memory_mib=1024,
    )
    assert findings("gang_whole") == [
        {
            "gang_id": gang.pk,
            "gang": "train",
            "tenant": quota.tenant.slug,
            "state": GangState.PLACED,
            "members": 2,
            "placed_members": 1,
            "min_available": 2,
        }
    ]


def test_codespace_disagreeing_with_its_workload_is_reported_after_grace(
    placed: Workload, bob: Any
) -> None:
    # given a codespace that says stopped while its workload is still placed
    codespace = CodespaceFactory(
        owner=bob,
        tenant=placed.tenant,
        quota=placed.quota,
        workload=placed,
        state=CodespaceState.STOPPED,
    )
    # and one that is running without any workload
    orphan = CodespaceFactory(
        owner=bob, tenant=placed.tenant, quota=placed.quota, state=CodespaceState.RUNNING
    )
    # then a moment later nothing is reported yet (the observer may still be catching up) ...
    assert findings("codespace_state", later=False) == []
    # ... and once grace has passed both are
    rows = findings("codespace_state")
    assert [(r["codespace_id"], r["codespace_state"], r["workload_state"]) for r in rows] == [
        (codespace.pk, CodespaceState.STOPPED, placed.state),
        (orphan.pk, CodespaceState.RUNNING, "(none)"),
    ]


def test_codespace_following_its_workload_is_not_reported(placed: Workload, bob: Any) -> None:
    expected = CodespaceState.RUNNING if placed.state == WorkloadState.RUNNING else "starting"
    CodespaceFactory(
        owner=bob, tenant=placed.tenant, quota=placed.quota, workload=placed, state=expected
    )
    assert findings("codespace_state") == []


def test_pending_without_reason_and_failed_without_message_are_reported(quota: Any) -> None:
    # given one workload no cycle ever looked at, one whose reason was wiped, one failed silently
    waiting = submit(quota, "never-considered")
    silent = submit(quota, "silent")
    Workload.objects.filter(pk=silent.pk).update(pending_reason="", pending_code="no_capacity")
    failed = submit(quota, "broken")
    Workload.objects.filter(pk=failed.pk).update(state=WorkloadState.FAILED, failure_reason="")
    # the pending one only once it has waited longer than grace without a reason
    assert [r["workload_id"] for r in findings("workload_explained", later=False)] == [failed.pk]
    rows = findings("workload_explained")
    assert [(r["workload_id"], r["state"], r["missing"]) for r in rows] == [
        (waiting.pk, WorkloadState.PENDING, "pending_reason"),
        (silent.pk, WorkloadState.PENDING, "pending_reason"),
        (failed.pk, WorkloadState.FAILED, "failure_reason"),
    ]


def test_orphaned_and_missing_backend_objects_are_reported(placed: Workload, quota: Any) -> None:
    # given the placed workload's pod is gone and a pod runs for a workload that holds nothing
    SimulatedPod.objects.filter(workload_id=placed.pk).delete()
    stray = submit(quota, "stray")
    SimulatedPod.objects.create(
        workload_id=stray.pk,
        name="job-stray",
        node_name="training-c0",
        running_after=timezone.now(),
    )
    rows = findings("backend_objects")
    node = Placement.objects.get(workload=placed, released_at=None).node.name
    assert rows == [
        {
            "problem": "orphaned backend object",
            "workload_id": stray.pk,
            "object": "job-stray",
            "node": "training-c0",
        },
        {
            "problem": "placement without backend object",
            "workload_id": placed.pk,
            "object": "nb",
            "node": node,
        },
    ]


def test_backend_check_is_skipped_on_kubernetes(settings: Any, quota: Any) -> None:
    settings.TESSERA_BACKEND = "kubernetes"
    report = audit.run_audit(only=["backend_objects"])
    assert [(r.name, r.status) for r in report.results] == [("backend_objects", "skipped")]


def test_a_failing_check_is_an_error_and_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch, placed: Workload
) -> None:
    def broken(context: Any) -> list[dict[str, Any]]:
        raise ValueError("bad row")

    first = audit.INVARIANTS[0]
    monkeypatch.setattr(
        audit,
        "INVARIANTS",
        (audit.Invariant(first.name, first.description, broken),) + audit.INVARIANTS[1:],
    )
    report = audit.run_audit(now=timezone.now() + LATER)
    assert report.errors == {first.name: "ValueError: bad row"}
    assert [r.status for r in report.results[1:]] == ["ok"] * (len(audit.INVARIANTS) - 1)


def test_command_exits_1_and_prints_the_violation(placed: Workload) -> None:
    Node.objects.filter(placements__workload=placed).update(cpu_milli=10)
    out = StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("audit", "--grace", "0", stdout=out)
    assert exit_info.value.code == 1
    lines = out.getvalue().splitlines()
    assert [line.split()[:3] for line in lines if line.startswith("node_capacity")] == [
        ["node_capacity", "violated", "1"]
    ]
    assert "capacity_cpu_milli=10" in out.getvalue()


def test_command_json_on_a_clean_database_exits_0(placed: Workload) -> None:
    out = StringIO()
    call_command("audit", "--json", "--grace", "0", "--record", stdout=out)
    data = json.loads(out.getvalue())
    assert data["violations"] == 0
    assert {i["name"]: i["status"] for i in data["invariants"]} == dict.fromkeys(
        audit.INVARIANT_NAMES, "ok"
    )
    assert InvariantAuditRun.objects.get().violations == 0


def test_task_stores_counts_and_findings_of_the_run(placed: Workload, settings: Any) -> None:
    settings.TESSERA_AUDIT_GRACE_SECONDS = 0
    Node.objects.filter(placements__workload=placed).update(cpu_milli=10)
    counts = audit_invariants_task()
    run = InvariantAuditRun.objects.get()
    assert counts == run.counts
    assert run.counts["node_capacity"] == 1
    assert run.violations == 1
    assert [f["capacity_cpu_milli"] for f in run.findings["node_capacity"]] == [10]
    assert run.errors == {}


def test_task_keeps_only_the_latest_runs(quota: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "RUNS_KEPT", 2)
    for _ in range(3):
        audit_invariants_task()
    assert InvariantAuditRun.objects.count() == 2


def test_audit_is_on_beat(settings: Any) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["scheduling-audit-invariants"]
    assert entry["task"] == "scheduling.tasks.audit_invariants_task"
    assert entry["schedule"] == settings.TESSERA_AUDIT_INTERVAL_SECONDS


@pytest.mark.parametrize(
    ("_case", "who", "status"),
    [
        ("operator", "operator", 200),
        ("team admin", "alice", 404),
        ("member", "bob", 404),
        ("other team", "charlie", 404),
    ],
)
def test_audit_page_is_for_operators_only(
    client: Any, request: pytest.FixtureRequest, _case: str, who: str, status: int
) -> None:
    client.force_login(request.getfixturevalue(who))
    assert client.get("/cluster/audit/").status_code == status


def test_audit_page_shows_each_invariant_and_the_findings(
    client: Any, operator: Any, placed: Workload, settings: Any
) -> None:
    settings.TESSERA_AUDIT_GRACE_SECONDS = 0
    Node.objects.filter(placements__workload=placed).update(cpu_milli=10)
    audit_invariants_task()
    client.force_login(operator)
    response = client.get("/cluster/audit/")
    statuses = {s.name: s.status for s in response.context["invariants"]}
    assert statuses == {
        name: ("violated" if name == "node_capacity" else "ok") for name in audit.INVARIANT_NAMES
    }
    html = response.content.decode()
    assert 'data-testid="findings-node_capacity"' in html
    assert 'href="/cluster/audit/"' in html  # linked in the nav


def test_audit_page_before_any_run(client: Any, operator: Any) -> None:
    client.force_login(operator)
    response = client.get("/cluster/audit/")
    assert {s.status for s in response.context["invariants"]} == {"never run"}


def test_metrics_expose_violations_per_invariant(
    client: Any, operator: Any, placed: Workload, settings: Any
) -> None:
    settings.TESSERA_AUDIT_GRACE_SECONDS = 0
    settings.TESSERA_BACKEND = "simulated"
    Node.objects.filter(placements__workload=placed).update(cpu_milli=10)
    audit_invariants_task()
    client.force_login(operator)
    lines = client.get("/metrics").content.decode().splitlines()
    gauges = {
        line.split("{")[1].split("}")[0]: line.rsplit(" ", 1)[1]
        for line in lines
        if line.startswith("tessera_invariant_violations{")
    }
    assert gauges == {
        f'invariant="{name}"': ("1" if name == "node_capacity" else "0")
        for name in audit.INVARIANT_NAMES
    }
    assert any(line.startswith("tessera_invariant_audit_timestamp_seconds ") for line in lines)
