"""Equal share of a team's borrowing among its active users, through real scheduling cycles: one
person cannot take the team's whole burst when the quota shares it equally (off by default)."""

from __future__ import annotations

from typing import Any

import pytest

from portal.tests.factories import UserFactory
from scheduling import services
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from scheduling.services.cycle import run_cycle
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db
ACTIVE = (WorkloadState.PLACED, WorkloadState.RUNNING)


def submit(quota: Any, owner: Any, count: int) -> list[Workload]:
    return [
        services.submit_workload(
            tenant=quota.tenant,
            quota=quota,
            owner=owner,
            kind="job_pod",
            name=f"{owner.username}-{i}",
            cpu_milli=1000,
            memory_mib=1024,
            gpu_count=1,
            gpu_milli=1000,
            gpu_memory_mib=40960,
        )  # fmt: skip
        for i in range(count)
    ]


def running(workloads: list[Workload]) -> int:
    return Workload.objects.filter(pk__in=[w.pk for w in workloads], state__in=ACTIVE).count()


def team(equal_share: bool) -> tuple[Any, Any]:
    """8 A100; `team` (min 0, all it runs is borrowed from the idle `lab`, min 8)."""
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    group = make_group()
    make_quota(group, name="lab", gpu_min_milli=8000, gpu_min_gpu_memory_mib=8 * 40960)
    return group, make_quota(group, name="team", equal_borrowing_share=equal_share)


@pytest.mark.parametrize("equal_share", [False, True])
def test_the_teams_borrowing_is_shared_equally_among_its_active_users(equal_share: bool) -> None:
    group, quota = team(equal_share)
    ann, ben = UserFactory(username="ann"), UserFactory(username="ben")
    anns = submit(quota, ann, 8)  # ann asks first, for all of it
    bens = submit(quota, ben, 2)

    run_cycle(group.pk)

    if not equal_share:
        assert (running(anns), running(bens)) == (8, 0)  # first come takes the whole burst
        return
    # 8 GPUs of borrowing ÷ 2 active users: at most 4 each
    assert (running(anns), running(bens)) == (4, 2)
    waiting = Workload.objects.get(pk=anns[4].pk)
    assert waiting.pending_code == "equal_share"
    assert waiting.pending_reason == (
        "team shares its borrowing equally among its 2 active users: 8 GPUs of borrowing ÷ 2 = "
        "4 GPUs each beyond an equal share of min (0 GPUs), so at most 4 GPUs per person; its "
        "owner holds 0 + 4 admitted this cycle, request 1."
    )
