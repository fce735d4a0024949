"""Start-time estimates of waiting workloads from the group's state and its recorded run times."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from scheduling import services
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from scheduling.services.start_estimates import (
    compute_group_estimates,
    describe_range,
    estimate_for,
)
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db

#: Recorded run times of finished job pods of the quota: 20, 30, 40 and 50 minutes.
HISTORY = (1200, 1800, 2400, 3000)


def submit(quota: Any, name: str, image: str = "") -> Workload:
    return services.submit_workload(
        tenant=quota.tenant,
        quota=quota,
        kind="job_pod",
        name=name,
        cpu_milli=1000,
        memory_mib=1024,
        gpu_count=1,
        gpu_milli=1000,
        image=image,
    )


def finished(quota: Any, name: str, seconds: int, image: str = "") -> None:
    done = submit(quota, name, image)
    start = timezone.now() - timedelta(days=1)
    Workload.objects.filter(pk=done.pk).update(
        state=WorkloadState.SUCCEEDED,
        started_at=start,
        finished_at=start + timedelta(seconds=seconds),
    )


def one_busy_gpu(tenant: Any = None) -> tuple[Any, Any, Any]:
    """One GPU, held by a job pod running for 10 minutes, four finished job pods, and the quota."""
    small_cluster(gpu_nodes=1, gpus_per_node=1)
    quota = make_quota(make_group(), tenant)
    now = timezone.now()
    running = submit(quota, "running")
    services.run_cycle(quota.group_id)
    running.refresh_from_db()
    assert running.state == WorkloadState.PLACED
    Workload.objects.filter(pk=running.pk).update(started_at=now - timedelta(minutes=10))
    # recorded after the GPU is taken, so no cycle (a live server's) can place them meanwhile
    for k, seconds in enumerate(HISTORY):
        done = submit(quota, f"done-{k}")
        Workload.objects.filter(pk=done.pk).update(
            state=WorkloadState.SUCCEEDED,
            started_at=now - timedelta(days=1),
            finished_at=now - timedelta(days=1) + timedelta(seconds=seconds),
        )
    return quota, running, now


def test_waiting_pods_get_ranges_from_the_recorded_run_times_of_their_quota() -> None:
    quota, _, now = one_busy_gpu()
    first, second = submit(quota, "first"), submit(quota, "second")
    services.run_cycle(quota.group_id)
    out = compute_group_estimates(quota.group, now)
    a, b = out[first.pk], out[second.pk]
    # the running pod (10 min in) ends 13 min (10 % quantile of 20-50 min runs longer than 10 min:
    # 23 min) to 37 min (90 %: 47 min) from now; "second" then waits for "first"'s 23 / 47 min
    assert ((a.earliest - now).total_seconds(), (a.latest - now).total_seconds()) == (780, 2220)
    assert ((b.earliest - now).total_seconds(), (b.latest - now).total_seconds()) == (2160, 5040)
    assert (a.position, b.position) == (1, 2)
    assert a.summary == "likely in 13–37 min"
    assert b.summary == "likely in 36–84 min"
    assert a.reason.startswith("0 ahead in the queue; ")
    assert b.reason.startswith("1 ahead in the queue; ")


def test_only_waiting_workloads_have_an_estimate_and_it_is_cached_per_queue() -> None:
    quota, running, _ = one_busy_gpu()
    assert estimate_for(running) is None
    waiting = submit(quota, "waiting")
    services.run_cycle(quota.group_id)
    waiting.refresh_from_db()
    first = estimate_for(waiting)
    assert first is not None
    assert first.position == 1
    assert estimate_for(waiting) == first  # same shard version and queue: the cached estimate


def test_ranges_read_as_people_say_them() -> None:
    now = timezone.now()
    at = lambda s: now + timedelta(seconds=s)  # noqa: E731
    assert describe_range(at(60), at(200), now) == "likely within 5 min"
    assert describe_range(at(1200), at(2400), now) == "likely in 20–40 min"
    assert describe_range(at(1800), at(1810), now) == "likely in about 30 min"
    assert describe_range(at(3600), at(4 * 3600), now) == "likely in 60 min – 4 h"
    assert describe_range(at(7200), None, now) == "likely in 2 h or later"
    assert describe_range(None, None, now) == "not expected within 30 days"


def test_the_api_and_the_workload_page_show_the_range_and_the_reason(
    alice: Any, charlie: Any, team_a: Any, api_as: Any
) -> None:
    quota, running, _ = one_busy_gpu(team_a)
    waiting = submit(quota, "waiting")
    services.run_cycle(quota.group_id)
    body = api_as(alice).get(f"/api/v1/workloads/{waiting.pk}/start-estimate/").json()
    assert (body["workload"], body["state"], body["waiting"], body["position"]) == (
        waiting.pk,
        "pending",
        True,
        1,
    )
    assert body["summary"] == "likely in 13–37 min"
    assert body["reason"].startswith("0 ahead in the queue; ")
    placed = api_as(alice).get(f"/api/v1/workloads/{running.pk}/start-estimate/").json()
    assert (placed["waiting"], placed["summary"], placed["earliest"]) == (False, None, None)
    other_team = api_as(charlie).get(f"/api/v1/workloads/{waiting.pk}/start-estimate/")
    assert other_team.status_code == 404
    client = Client()
    client.force_login(alice)
    page = client.get(f"/cluster/workloads/{waiting.pk}/").content.decode()
    assert '<span data-testid="start-estimate">likely in 13–37 min</span>' in page


def test_a_pod_of_a_quota_at_its_max_waits_for_its_own_work_not_for_a_free_gpu() -> None:
    # given two GPUs, quota a capped at one GPU and holding it for 10 min so far, and a's history
    small_cluster(gpu_nodes=1, gpus_per_node=2)
    group = make_group()
    quota = make_quota(group, gpu_max_milli=1000)
    now = timezone.now()
    running = submit(quota, "running")
    services.run_cycle(group.pk)
    Workload.objects.filter(pk=running.pk).update(started_at=now - timedelta(minutes=10))
    for k, seconds in enumerate(HISTORY):
        finished(quota, f"done-{k}", seconds)
    waiting = submit(quota, "waiting")
    services.run_cycle(group.pk)
    waiting.refresh_from_db()
    assert waiting.state == WorkloadState.PENDING  # the free GPU is past a's max
    # when the forecast checks a's max going forward, the pod starts when a's running pod ends
    # (13-37 min, as with one GPU), not now on the free GPU
    estimate = compute_group_estimates(group, now)[waiting.pk]
    assert (estimate.earliest, estimate.latest) == (
        now + timedelta(seconds=780),
        now + timedelta(seconds=2220),
    )


def test_a_pod_over_its_quota_is_told_it_waits_for_quota_not_that_it_fits() -> None:
    # issue 38: an over-quota codespace read "(it fits, but requests ahead of it come first)"
    small_cluster(gpu_nodes=1, gpus_per_node=2)
    group = make_group()
    quota = make_quota(group, gpu_max_milli=1000)
    submit(quota, "running")
    services.run_cycle(group.pk)
    waiting = submit(quota, "waiting")
    services.run_cycle(group.pk)
    reason = compute_group_estimates(group, timezone.now())[waiting.pk].reason
    assert reason == (
        "0 ahead in the queue; it waits for quota: its team holds 1 of its 1-GPU max and this "
        "asks for 1 more"
    )


def test_the_run_times_of_the_same_template_come_before_the_teams() -> None:
    # given one GPU held for 10 min by a pod of image "train", whose five recorded runs took 2 h each,
    # while the team's other pods ("notebook") ran 20-50 min
    small_cluster(gpu_nodes=1, gpus_per_node=1)
    quota = make_quota(make_group())
    now = timezone.now()
    running = submit(quota, "running", image="train")
    services.run_cycle(quota.group_id)
    Workload.objects.filter(pk=running.pk).update(started_at=now - timedelta(minutes=10))
    for k in range(5):
        finished(quota, f"train-{k}", 7200, image="train")
    for k, seconds in enumerate(HISTORY):
        finished(quota, f"notebook-{k}", seconds, image="notebook")
    waiting = submit(quota, "waiting", image="notebook")
    services.run_cycle(quota.group_id)
    # then the running pod is expected to end 110 min from now (its template's 2 h), not in 13-37 min
    estimate = compute_group_estimates(quota.group, now)[waiting.pk]
    in_110_min = now + timedelta(seconds=6600)
    assert (estimate.earliest, estimate.latest) == (in_110_min, in_110_min)
