"""Per-person GPU caps through real cycles: set through the API (operators, audited), enforced by
admission in the cycle, and held under concurrent cycles (PostgreSQL, threads with their own
connections)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections

from quotas.models import QuotaChange
from scheduling import services
from scheduling.choices import ACTIVE_STATES
from scheduling.models import Workload
from scheduling.services.cycle import run_cycle
from scheduling.tests.factories import make_group, make_quota, small_cluster


def submit_many(quota: Any, owner: Any, count: int) -> list[Workload]:
    return [
        services.submit_workload(
            tenant=quota.tenant,
            quota=quota,
            kind="job_pod",
            name=f"{owner.username}-{i}",
            owner=owner,
            cpu_milli=1000,
            memory_mib=1024,
            gpu_count=1,
            gpu_milli=1000,
            gpu_memory_mib=40960,
        )  # fmt: skip
        for i in range(count)
    ]


def held_by(owner: Any) -> int:
    return Workload.objects.filter(owner=owner, state__in=ACTIVE_STATES).count()


@pytest.mark.django_db
def test_the_cap_set_through_the_api_stops_one_person_not_the_team(
    api_as: Any, operator: Any, alice: Any, bob: Any, team_a: Any
) -> None:
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    quota = make_quota(make_group(), team_a, name="team-a")
    response = api_as(operator).post(
        f"/api/v1/quotas/{quota.pk}/user-cap/", {"max_gpus_per_user": 2}, format="json"
    )
    assert (response.status_code, response.json()["max_gpus_per_user"]) == (200, 2)
    bad = api_as(operator).post(
        f"/api/v1/quotas/{quota.pk}/user-cap/", {"max_gpus_per_user": 0}, format="json"
    )
    assert bad.status_code == 400
    assert "max_gpus_per_user" in bad.json()["error"]["fields"]
    assert (
        api_as(alice)
        .post(f"/api/v1/quotas/{quota.pk}/user-cap/", {"max_gpus_per_user": 8}, format="json")
        .status_code
        == 403
    )
    submit_many(quota, alice, 5)
    submit_many(quota, bob, 2)
    run_cycle(quota.group_id)
    assert (held_by(alice), held_by(bob)) == (2, 2)
    waiting = Workload.objects.filter(owner=alice, state="pending").order_by("pk").first()
    assert waiting is not None
    assert waiting.pending_code == "user_cap"
    assert waiting.pending_reason == (
        "team-a: one person may hold at most 2 GPUs of this quota; its owner holds 0 + 2 admitted "
        "this cycle, request 1."
    )
    run_cycle(quota.group_id)  # the next cycle reads what alice holds now
    assert held_by(alice) == 2
    assert Workload.objects.get(pk=waiting.pk).pending_reason.endswith(
        "its owner holds 2, request 1."
    )
    change = QuotaChange.objects.get(subject="user_cap")
    assert (change.before, change.after) == ({"max_gpus_per_user": None}, {"max_gpus_per_user": 2})


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="row locks need PostgreSQL (DATABASE_URL)"
)
def test_two_cycles_at_once_never_let_one_person_past_the_cap(alice: Any, team_a: Any) -> None:
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    quota = make_quota(make_group(), team_a, name="team-a", max_gpus_per_user=3)
    submit_many(quota, alice, 8)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def cycle() -> None:
        barrier.wait()
        try:
            run_cycle(quota.group_id)
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=cycle) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert held_by(alice) == 3


@pytest.mark.django_db
def test_work_held_back_by_a_persons_cap_does_not_reserve_the_teams_share(
    alice: Any, bob: Any, team_a: Any, team_b: Any
) -> None:
    # given 8 GPUs, two teams with 4 GPUs of min each and max 8; team-a caps a person at 2 GPUs
    small_cluster(gpu_nodes=2, gpus_per_node=4)
    group = make_group()
    mine = make_quota(group, team_a, name="team-a", gpu_min_milli=4000, gpu_max_milli=8000)
    mine.max_gpus_per_user = 2
    mine.save(update_fields=["max_gpus_per_user"])
    theirs = make_quota(group, team_b, name="team-b", gpu_min_milli=4000, gpu_max_milli=8000)
    # alice alone wants 6 GPUs of team-a (2 may run), bob 6 of team-b
    submit_many(mine, alice, 6)
    submit_many(theirs, bob, 6)
    run_cycle(group.pk)
    run_cycle(group.pk)
    # alice's 4 capped jobs cannot run whatever team-b does: they are not demand that holds back
    # team-b's borrowing, so team-b borrows team-a's 2 idle GPUs of min
    assert (held_by(alice), held_by(bob)) == (2, 6)
    capped = Workload.objects.filter(owner=alice, state="pending")
    assert {w.pending_code for w in capped} == {"user_cap"}
