"""Dynamic MIG end to end on the simulated backend: a cycle plans a new layout for an empty dynamic card,
the reconfiguration is applied as its own step, the waiting job starts only once it is ready; failure
and timeout put the job back in the queue with the reason and leave the card's layout as it was."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from quotas import services as quota_services
from scheduling import services
from scheduling.backends.registry import get_backend
from scheduling.choices import MigReconfigurationState, WorkloadState
from scheduling.inventory import sync_inventory_rows
from scheduling.models import Gpu, MigReconfiguration, Placement, SimulatedPod, Workload
from scheduling.services import reconcile
from scheduling.services.mig_reconfig import drive_reconfigurations
from scheduling.tests.factories import gpu_node, make_quota

pytestmark = pytest.mark.django_db


@pytest.fixture
def dynamic_quota() -> Any:
    sync_inventory_rows([gpu_node("h100-01", "H100-80GB", 80, gpus=1, pool="isolated")])
    Gpu.objects.update(mig_dynamic=True)
    group = quota_services.create_group(
        name="isolated",
        node_selector={"pool": "isolated"},
        sharing_mode="mig",
        mig_profiles=["1g.10gb", "3g.40gb", "7g.80gb"],
    ).obj
    return make_quota(group)


def _submit(quota: Any, name: str, profile: str) -> Workload:
    return services.submit_workload(
        tenant=quota.tenant,
        quota=quota,
        kind="job_pod",
        name=name,
        cpu_milli=1000,
        memory_mib=1024,
        mig_profile=profile,
    )


def _states(r: MigReconfiguration) -> list[str]:
    return [t["state"] for t in r.transitions]


def test_a_cycle_reconfigures_an_empty_dynamic_card_and_the_job_starts_once_it_is_ready(
    dynamic_quota: Any, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.TESSERA_SIM_MIG_RECONFIGURE_SECONDS = 3600
    job = _submit(dynamic_quota, "small", "1g.10gb")
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_cycle(dynamic_quota.group_id).placed == 1
    r = MigReconfiguration.objects.get()
    assert (r.state, r.old_layout, r.new_layout) == (
        "planned",
        [],
        [["1g.10gb", r.new_layout[0][1]]],
    )
    job.refresh_from_db()
    assert job.state == WorkloadState.PLACED
    assert job.pending_code == "mig_reconfiguring"
    assert job.pending_reason.startswith(
        "Waiting for the card's MIG reconfiguration (h100-01 GPU 0: empty → 1g.10gb@"
    )
    assert Placement.objects.get(workload=job).mig_reconfiguration_id == r.pk
    assert not SimulatedPod.objects.exists()  # not started: its instance does not exist yet

    # planned → applying; the simulated MIG manager needs an hour: the job still waits
    assert drive_reconfigurations().applying == [r.pk]
    with django_capture_on_commit_callbacks(execute=True):
        assert drive_reconfigurations().ready == []
        reconcile.reconcile_backend_orphans()  # a PLACED workload without a pod is not started early
    assert not SimulatedPod.objects.exists()
    r.refresh_from_db()
    assert r.state == "applying"
    assert r.deadline_at is not None
    assert r.applying_at is not None

    # ready: the card has the new layout and the job starts
    settings.TESSERA_SIM_MIG_RECONFIGURE_SECONDS = 0
    with django_capture_on_commit_callbacks(execute=True):
        assert drive_reconfigurations().ready == [r.pk]
    r.refresh_from_db()
    assert _states(r) == ["planned", "applying", "ready"]
    assert r.finished_at is not None
    assert Gpu.objects.get().mig_layout == r.new_layout
    assert SimulatedPod.objects.filter(workload_id=job.pk).count() == 1
    job.refresh_from_db()
    assert (job.pending_code, job.pending_reason) == ("", "")
    settings.TESSERA_SIM_START_DELAY_SECONDS = 0
    assert reconcile.sync_status().running == 1
    job.refresh_from_db()
    assert job.state == WorkloadState.RUNNING
    # driving again changes nothing (retries are harmless)
    assert drive_reconfigurations().ready == []
    assert _states(MigReconfiguration.objects.get()) == ["planned", "applying", "ready"]


def test_the_next_job_takes_a_free_instance_of_the_new_layout_without_a_reconfiguration(
    dynamic_quota: Any, settings: Any
) -> None:
    settings.TESSERA_SIM_MIG_RECONFIGURE_SECONDS = 0
    Gpu.objects.update(mig_layout=[["1g.10gb", 0], ["1g.10gb", 1]])
    job = _submit(dynamic_quota, "small", "1g.10gb")
    assert services.run_cycle(dynamic_quota.group_id).placed == 1
    job.refresh_from_db()
    assert not MigReconfiguration.objects.exists()
    assert job.pending_code == ""
    assert Placement.objects.get(workload=job).mig_reconfiguration_id is None


def test_a_card_with_work_on_it_is_never_reconfigured(dynamic_quota: Any) -> None:
    Gpu.objects.update(mig_layout=[["1g.10gb", 0]])
    first = _submit(dynamic_quota, "first", "1g.10gb")
    assert services.run_cycle(dynamic_quota.group_id).placed == 1
    big = _submit(dynamic_quota, "big", "3g.40gb")
    assert services.run_cycle(dynamic_quota.group_id).placed == 0
    big.refresh_from_db()
    first.refresh_from_db()
    assert (first.state, big.state) == (WorkloadState.PLACED, WorkloadState.PENDING)
    assert "no card has a free 3g.40gb position" in big.pending_reason
    assert not MigReconfiguration.objects.exists()


def test_a_failed_reconfiguration_requeues_the_job_with_the_reason_and_keeps_the_old_layout(
    dynamic_quota: Any, settings: Any
) -> None:
    gpu = Gpu.objects.get()
    settings.TESSERA_SIM_MIG_FAIL_GPUS = [gpu.uuid]
    job = _submit(dynamic_quota, "small", "1g.10gb")
    assert services.run_cycle(dynamic_quota.group_id).placed == 1
    r = MigReconfiguration.objects.get()
    assert drive_reconfigurations().applying == [r.pk]
    assert drive_reconfigurations().failed == [r.pk]
    r.refresh_from_db()
    assert _states(r) == ["planned", "applying", "failed"]
    assert r.reason == f"simulated MIG reconfiguration failure of {gpu.uuid}"
    job.refresh_from_db()
    assert job.state == WorkloadState.PENDING
    assert job.pending_code == "mig_reconfiguration_failed"
    assert job.pending_reason == (
        f"Requeued: MIG reconfiguration of h100-01 GPU 0 failed: {r.reason}"
    )
    assert not Placement.objects.filter(workload=job, released_at__isnull=True).exists()
    assert Gpu.objects.get().mig_layout == []  # the card's previous layout
    assert not SimulatedPod.objects.exists()
    # the card is not tried again at once: the job waits instead of looping on a failing card
    assert services.run_cycle(dynamic_quota.group_id).placed == 0
    assert MigReconfiguration.objects.count() == 1


def test_a_stuck_reconfiguration_times_out_to_failed(dynamic_quota: Any, settings: Any) -> None:
    settings.TESSERA_SIM_MIG_RECONFIGURE_SECONDS = 3600
    settings.TESSERA_MIG_RECONFIGURE_TIMEOUT_SECONDS = 60
    job = _submit(dynamic_quota, "small", "1g.10gb")
    services.run_cycle(dynamic_quota.group_id)
    r = MigReconfiguration.objects.get()
    drive_reconfigurations()
    assert drive_reconfigurations(now=timezone.now() + timedelta(seconds=30)).failed == []
    assert drive_reconfigurations(now=timezone.now() + timedelta(seconds=61)).failed == [r.pk]
    r.refresh_from_db()
    assert (r.state, r.reason) == ("failed", "timed out: not applied within 60 s")
    job.refresh_from_db()
    assert job.state == WorkloadState.PENDING
    assert "timed out" in job.pending_reason


def test_one_bad_reconfiguration_does_not_stop_the_others(settings: Any) -> None:
    settings.TESSERA_SIM_MIG_RECONFIGURE_SECONDS = 3600
    sync_inventory_rows([gpu_node("h100-01", "H100-80GB", 80, gpus=2, pool="isolated")])
    Gpu.objects.update(mig_dynamic=True)
    bad_gpu, good_gpu = Gpu.objects.order_by("index")
    bad = MigReconfiguration.objects.create(
        gpu=bad_gpu, new_layout=[["1g.10gb", 0], ["7g.80gb", 0]]
    )
    good = MigReconfiguration.objects.create(gpu=good_gpu, new_layout=[["3g.40gb", 4]])
    report = drive_reconfigurations(backend=get_backend())
    assert (report.failed, report.applying) == ([bad.pk], [good.pk])
    bad.refresh_from_db()
    assert bad.state == MigReconfigurationState.CANCELLED
    assert bad.reason == "invalid layout: 7g.80gb at 0 overlaps another instance"


def test_only_one_active_reconfiguration_per_card() -> None:
    from django.db import IntegrityError, transaction

    sync_inventory_rows([gpu_node("h100-01", "H100-80GB", 80, gpus=1, pool="isolated")])
    gpu = Gpu.objects.get()
    MigReconfiguration.objects.create(gpu=gpu, new_layout=[["1g.10gb", 0]])
    with pytest.raises(IntegrityError), transaction.atomic():
        MigReconfiguration.objects.create(gpu=gpu, new_layout=[["1g.10gb", 1]])


def test_the_cluster_page_and_the_api_show_a_reconfiguring_card(
    dynamic_quota: Any, settings: Any, client: Any
) -> None:
    from django.contrib.auth import get_user_model

    settings.TESSERA_SIM_MIG_RECONFIGURE_SECONDS = 3600
    _submit(dynamic_quota, "small", "1g.10gb")
    services.run_cycle(dynamic_quota.group_id)
    drive_reconfigurations()
    r = MigReconfiguration.objects.get()
    user = get_user_model().objects.create_user("viewer", password="pw-123456789")
    dynamic_quota.tenant.memberships.create(user=user, role="member")
    client.force_login(user)

    page = client.get("/cluster/").content.decode()
    assert 'data-testid="mig-reconfiguration-' + str(r.pk) + '"' in page
    start = r.new_layout[0][1]
    assert f"h100-01 GPU 0</td>\n      <td>empty → 1g.10gb@{start}</td>" in page
    assert ">reconfiguring</span>" in page

    listed = client.get("/api/v1/mig-reconfigurations/?node=h100-01&state=applying").json()
    assert [
        (x["id"], x["state"], x["old_layout"], x["new_layout"], x["waiting"])
        for x in listed["results"]
    ] == [(r.pk, "applying", [], [["1g.10gb", start]], 1)]
    assert client.get("/api/v1/mig-reconfigurations/?state=ready").json()["results"] == []
    bad = client.get("/api/v1/mig-reconfigurations/?state=done")
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {
        "state": ["Unknown value 'done'; use one of: planned, applying, ready, failed, cancelled."]
    }
