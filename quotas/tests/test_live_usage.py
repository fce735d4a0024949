"""A group's live workloads read one by one and summed read the same figures (one reader, one charge)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from quotas.resources import Resources, Side
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_gang, make_workload
from quotas.usage import (
    QuotaSpec,
    active_usage,
    aggregate,
    aggregated_usage,
    build_snapshot,
    group_capacity,
    live_usage,
    lowest_preemptible,
    pending_usage,
    usage_of,
)
from scheduling.models import Workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def live(team_a, team_b):
    """Two quotas with slices, whole cards (charged the card), CPU-only work, pending and active,
    preemptible or not, a gang; plus finished work that counts nowhere."""
    group = QuotaGroupFactory(name="training")
    qa, qb = QuotaFactory(group=group, tenant=team_a), QuotaFactory(group=group, tenant=team_b)
    gang = make_gang(qa, "train", min_available=2)
    make_workload(qa, gpu_count=1, gpu_milli=250, gpu_memory_mib=10240)
    make_workload(qa, state="pending", gpu_count=1, gpu_milli=500, gpu_memory_mib=20480)
    whole = [
        make_workload(qa, state="placed", gpu_count=2, gang=gang),
        make_workload(qa, state="pending", gpu_count=2, gang=gang),
        make_workload(qb, gpu_count=4, preemptible=False),
    ]
    Workload.objects.filter(pk__in=[w.pk for w in whole]).update(whole_card_memory_mib=81920)
    make_workload(qb, cpu_milli=8000, memory_mib=16384)
    make_workload(qb, state="pending", cpu_milli=2000, preemptible=False)
    make_workload(qa, state="succeeded", gpu_count=8)
    make_workload(qb, state="failed", cpu_milli=64000)
    return group, qa, qb


def test_one_by_one_every_live_workload_is_charged_with_the_whole_card_it_holds(live):
    _, qa, qb = live
    usages = {u.name: u for u in live_usage(live[0])}
    assert len(usages) == 7  # the finished ones count nowhere
    charged = sorted(
        (u.quota_id, u.side.value, u.active, u.resources.gpu_memory_mib) for u in usages.values()
    )
    assert charged == sorted(
        [
            (qa.pk, "gpu", True, 10240),
            (qa.pk, "gpu", False, 20480),
            (qa.pk, "gpu", True, 2 * 81920),
            (qa.pk, "gpu", False, 2 * 81920),
            (qb.pk, "gpu", True, 4 * 81920),
            (qb.pk, "cpu", True, 0),
            (qb.pk, "cpu", False, 0),
        ]
    )
    assert {u.gang_name for u in usages.values() if u.gang_id} == {"train"}


def test_each_row_is_read_as_usage_of_reads_the_workload(live):
    # live_usage builds each WorkloadUsage from the row's columns; it must charge exactly as usage_of
    # does on the model (the one charge), apart from the owner it does not read.
    group = live[0]
    rows = (
        Workload.objects.filter(quota__group=group)
        .exclude(state__in=("succeeded", "failed"))
        .select_related("gang")
        .order_by("id")
    )
    assert live_usage(group) == [replace(usage_of(w), owner_id=None) for w in rows]


def test_the_summed_reading_equals_the_sum_of_the_one_by_one_reading(live):
    group = live[0]
    assert aggregated_usage(group) == aggregate(live_usage(group))


def test_snapshots_of_both_readings_have_the_same_figures(live):
    group = live[0]
    specs = [QuotaSpec.of(q) for q in group.quotas.select_related("tenant").order_by("name")]
    capacity = group_capacity(group)

    def snapshot(workloads):  # type: ignore[no-untyped-def]
        return build_snapshot(
            group_id=group.pk,
            group_name=group.name,
            allow_overcommitted_min=False,
            capacity=capacity,
            specs=specs,
            workloads=workloads,
        )

    one_by_one, summed = snapshot(live_usage(group)), snapshot(aggregated_usage(group))
    assert one_by_one.quotas == summed.quotas
    qb = summed.by_name("team-b")
    assert qb.side(Side.GPU).nonpreemptible_used == Resources(4000, 4 * 81920, 1000, 1024)
    assert qb.side(Side.CPU).pending == Resources(0, 0, 2000, 1024)


def test_waiting_work_held_back_by_a_cap_or_a_spent_budget_is_not_demand(live):
    group, qa, _ = live
    before = {u.name for u in live_usage(group)}
    capped = make_workload(qa, state="pending", gpu_count=1, gpu_milli=1000)
    spent = make_workload(qa, state="pending", gpu_count=1, gpu_milli=1000)
    waiting = make_workload(qa, state="pending", gpu_count=1, gpu_milli=1000)
    running = make_workload(qa, gpu_count=1, gpu_milli=1000)  # a code left from when it waited
    Workload.objects.filter(pk=capped.pk).update(pending_code="user_cap")
    Workload.objects.filter(pk=spent.pk).update(pending_code="budget_exhausted")
    Workload.objects.filter(pk__in=[waiting.pk, running.pk]).update(pending_code="quota_runtime")
    Workload.objects.filter(pk=running.pk).update(pending_code="user_cap")
    names = {u.name for u in live_usage(group)}
    assert names - before == {waiting.name, running.name}
    assert aggregated_usage(group) == aggregate(live_usage(group))  # both readings agree


def test_the_held_back_codes_are_the_admission_codes_of_a_cap_and_a_spent_budget():
    from quotas.admission import AdmissionCode
    from quotas.usage import HELD_BACK_CODES

    assert HELD_BACK_CODES == (AdmissionCode.USER_CAP.value, AdmissionCode.BUDGET_EXHAUSTED.value)


def test_running_work_summed_and_pending_work_one_by_one_read_the_same_figures(live):
    # What a cycle's reclaim plans on (scheduling.services.quota_bridge.reclaim_snapshot).
    group = live[0]
    everyone = live_usage(group)
    assert pending_usage(group) == [u for u in everyone if not u.active]
    mixed = [*aggregated_usage(group, active_only=True), *pending_usage(group)]
    assert aggregate(mixed) == aggregate(everyone)


def test_the_running_rows_of_some_workloads_come_with_every_running_member_of_their_gangs(live):
    group, qa, qb = live
    running = {u.name: u for u in live_usage(group) if u.active}
    member = next(u for u in running.values() if u.gang_id)
    alone = next(u for u in running.values() if not u.gang_id and u.quota_id == qb.pk)
    late = make_workload(
        qa, state="running", gpu_count=2, gang=Workload.objects.get(pk=member.workload_id).gang
    )
    waiting = next(u for u in live_usage(group) if not u.active and not u.gang_id)
    read = active_usage(
        group, [alone.workload_id, waiting.workload_id], gangs=[int(member.gang_id or 0)]
    )
    assert [u.workload_id for u in read] == sorted([alone.workload_id, member.workload_id, late.pk])
    assert read[0] == next(u for u in live_usage(group) if u.workload_id == read[0].workload_id)
    # asked by one member, the gang comes whole too
    assert {u.workload_id for u in active_usage(group, [late.pk])} == {member.workload_id, late.pk}
    assert active_usage(group, []) == []


def test_the_lowest_preemptible_running_work_outside_a_quota_bounds_what_a_reclaim_can_stop(live):
    group, qa, qb = live
    # team B runs a non-preemptible 4-GPU job and a preemptible CPU job: the CPU job, 0 GPU milli
    assert lowest_preemptible(group, other_than=qa.pk) == (0, 0)
    Workload.objects.filter(quota=qb, gpu_count=0).update(priority=3)
    make_workload(qb, gpu_count=1, gpu_milli=500, gpu_memory_mib=1024, priority=3)
    make_workload(qb, gpu_count=2, gpu_milli=1000, priority=1)
    assert lowest_preemptible(group, other_than=qa.pk) == (1, 2000)
    # team A's own work never counts against itself; nothing preemptible left: None
    Workload.objects.filter(quota=qb).update(preemptible=False)
    assert lowest_preemptible(group, other_than=qa.pk) is None
    assert lowest_preemptible(group, other_than=qb.pk) is not None
