"""quotas.services: validation leaves nothing changed, warnings, history, concurrency, what-if."""

from __future__ import annotations

import pytest

from portal.errors import Conflict, InvalidInput, PreconditionFailed
from quotas import history, services
from quotas.models import Quota, QuotaChange, QuotaGroup
from quotas.resources import Resources
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_node, make_workload

pytestmark = pytest.mark.django_db

BIG = {"gpu_max_gpu_memory_mib": 10**7, "gpu_max_cpu_milli": 10**6, "gpu_max_memory_mib": 10**8}


@pytest.fixture
def group():
    group = QuotaGroupFactory(name="training")
    make_node("g1", pool="training", gpu_count=8)
    return group


def _state():
    return (
        list(Quota.objects.order_by("pk").values()),
        QuotaChange.objects.count(),
    )


def test_create_quota_records_history(group, team_a, operator):
    saved = services.create_quota(
        group=group,
        tenant=team_a,
        actor=operator,
        note="initial",
        gpu_min_gpu_milli=2000,
        gpu_max_gpu_milli=4000,
        lend_idle_min=False,
        **BIG,
    )
    quota = saved.obj
    assert (quota.name, quota.version, quota.lend_idle_min) == ("team-a", 1, False)
    change = QuotaChange.objects.get()
    assert (change.action, change.actor, change.note, change.before) == (
        "created",
        operator,
        "initial",
        None,
    )
    assert (change.after or {})["gpu_max_gpu_milli"] == 4000
    assert change.subject_name == "training/team-a"


@pytest.mark.parametrize(
    ("_case", "values", "field", "message"),
    [
        (
            "min above max",
            {"gpu_min_gpu_milli": 5000, "gpu_max_gpu_milli": 4000},
            "gpu_min_gpu_milli",
            "Min 5 GPUs is more than max 4 GPUs (GPU side).",
        ),
        (
            "negative",
            {"cpu_max_cpu_milli": -1},
            "cpu_max_cpu_milli",
            "Must be 0 or more (no negatives).",
        ),
        (
            "not a number",
            {"gpu_max_gpu_milli": "lots"},
            "gpu_max_gpu_milli",
            "Enter a whole number.",
        ),
        (
            "absurdly large",
            {"gpu_max_gpu_milli": 10**20},
            "gpu_max_gpu_milli",
            "At most 1000000000000000.",
        ),
        ("unknown field", {"version": 7}, "version", "Unknown or read-only field 'version'."),
        (
            "mins above capacity",
            {"gpu_min_gpu_milli": 9000, "gpu_max_gpu_milli": 9000},
            "gpu_min_gpu_milli",
            "The GPU side mins of group training would add up to 9 GPUs, more than its capacity of 8 GPUs "
            "(the other quotas hold 0 GPUs). Lower the min, or allow overcommitted mins on the group.",
        ),
    ],
)
def test_invalid_create_changes_nothing(group, team_a, _case, values, field, message):
    before = _state()
    with pytest.raises(InvalidInput) as info:
        services.create_quota(group=group, tenant=team_a, **values)
    assert info.value.fields[field] == [message]
    assert _state() == before


def test_invalid_update_changes_nothing(group, team_a, operator):
    quota = QuotaFactory(group=group, tenant=team_a, gpu_max_gpu_milli=4000)
    before = _state()
    with pytest.raises(InvalidInput) as info:
        services.update_quota(quota, expected_version=1, actor=operator, gpu_min_gpu_milli=6000)
    assert list(info.value.fields) == ["gpu_min_gpu_milli"]
    assert _state() == before


def test_sum_of_mins_counts_siblings_and_can_be_overcommitted(group, team_a, team_b):
    QuotaFactory(group=group, tenant=team_a, gpu_min_gpu_milli=6000, gpu_max_gpu_milli=8000)
    with pytest.raises(InvalidInput) as info:
        services.create_quota(
            group=group, tenant=team_b, gpu_min_gpu_milli=3000, gpu_max_gpu_milli=3000
        )
    assert (
        "would add up to 9 GPUs, more than its capacity of 8 GPUs (the other quotas hold 6 GPUs)"
        in (info.value.fields["gpu_min_gpu_milli"][0])
    )
    services.update_group(group, expected_version=1, allow_overcommitted_min=True)
    saved = services.create_quota(
        group=group, tenant=team_b, gpu_min_gpu_milli=3000, gpu_max_gpu_milli=3000
    )
    assert saved.obj.gpu_min_gpu_milli == 3000


def test_second_quota_of_a_tenant_in_a_group_is_refused_but_another_group_is_fine(group, team_a):
    services.create_quota(group=group, tenant=team_a, gpu_max_gpu_milli=1000)
    with pytest.raises(InvalidInput) as info:
        services.create_quota(group=group, tenant=team_a, name="other", gpu_max_gpu_milli=1000)
    assert info.value.fields["tenant"] == [
        "team-a already holds a quota in group training (one per group)."
    ]
    other = QuotaGroupFactory(name="interactive")
    assert services.create_quota(group=other, tenant=team_a).obj.group == other


def test_shrinking_max_below_use_is_allowed_with_a_reclaim_warning(group, team_a, operator):
    quota = QuotaFactory(group=group, tenant=team_a, gpu_max_gpu_milli=4000, **BIG)
    make_workload(quota, gpu_count=3)
    saved = services.update_quota(
        quota, expected_version=1, actor=operator, note="shrink", gpu_max_gpu_milli=2000
    )
    assert saved.obj.gpu_max_gpu_milli == 2000
    assert saved.warnings == [
        "team-a GPU side uses 3 GPUs, more than the new max of 2 GPUs: this will trigger reclaim — 1 GPU "
        "runs above its runtime share and is stopped (preemptible work, whole gangs) when other quotas "
        "need the capacity; new work waits until use is below the max."
    ]
    change = QuotaChange.objects.get(action="updated")
    assert change.warnings == saved.warnings
    assert change.changed_fields() == [("gpu_max_gpu_milli", 4000, 2000)]
    assert (change.version, change.note) == (2, "shrink")


def test_stale_version_is_refused_and_changes_nothing(group, team_a):
    quota = QuotaFactory(group=group, tenant=team_a, gpu_max_gpu_milli=4000)
    services.update_quota(quota, expected_version=1, gpu_max_gpu_milli=5000)
    before = _state()
    with pytest.raises(PreconditionFailed) as info:
        services.update_quota(quota, expected_version=1, gpu_max_gpu_milli=6000)
    assert info.value.message == (
        "The object changed since you read it (now version 2); re-read it and apply your edit again."
    )
    assert _state() == before


def test_delete_refuses_a_quota_with_workloads(group, team_a):
    quota = QuotaFactory(group=group, tenant=team_a, gpu_max_gpu_milli=4000, **BIG)
    make_workload(quota, gpu_count=1, state="succeeded")
    with pytest.raises(Conflict):
        services.delete_quota(quota, expected_version=1)
    assert Quota.objects.filter(pk=quota.pk).exists()


def test_delete_quota_keeps_the_history_row(group, team_a, operator):
    quota = QuotaFactory(group=group, tenant=team_a)
    services.delete_quota(quota, expected_version=1, actor=operator, note="team left")
    assert not Quota.objects.exists()
    change = QuotaChange.objects.get()
    assert (change.action, change.subject_name, change.quota, change.note) == (
        "deleted",
        "training/team-a",
        None,
        "team left",
    )


def test_group_lifecycle_and_selector_check(group, team_a):
    saved = services.create_group(name="inference", node_selector={"pool": "inference"})
    assert saved.warnings == ["No node matches {'pool': 'inference'} yet: capacity is 0."]
    QuotaFactory(group=group, tenant=team_a, gpu_min_gpu_milli=4000, gpu_max_gpu_milli=4000)
    with pytest.raises(InvalidInput) as info:
        services.update_group(group, expected_version=1, node_selector={"pool": "nowhere"})
    assert list(info.value.fields) == ["node_selector"]
    assert QuotaGroup.objects.get(pk=group.pk).node_selector == {"pool": "training"}
    with pytest.raises(Conflict):
        services.delete_group(group, expected_version=1)
    services.delete_group(saved.obj, expected_version=1)
    assert not QuotaGroup.objects.filter(name="inference").exists()


def test_what_if_shows_every_sibling_before_and_after(group, team_a, team_b):
    qa = QuotaFactory(
        group=group, tenant=team_a, gpu_min_gpu_milli=2000, gpu_max_gpu_milli=8000, **BIG
    )
    qb = QuotaFactory(
        group=group, tenant=team_b, gpu_min_gpu_milli=2000, gpu_max_gpu_milli=8000, **BIG
    )
    make_workload(qa, state="pending", gpu_count=8, cpu_milli=0, memory_mib=0)
    make_workload(qb, state="pending", gpu_count=8, cpu_milli=0, memory_mib=0)
    rows = services.what_if(group, qa, {"gpu_min_gpu_milli": 6000})
    by_name = {row.name: row for row in rows}
    assert (by_name["team-a"].gpu_before.gpu_milli, by_name["team-a"].gpu_after.gpu_milli) == (
        4000,
        6000,
    )
    assert (by_name["team-b"].gpu_before.gpu_milli, by_name["team-b"].gpu_after.gpu_milli) == (
        4000,
        2000,
    )
    assert by_name["team-a"].is_target
    assert not by_name["team-b"].is_target
    # nothing was written
    assert Quota.objects.get(pk=qa.pk).gpu_min_gpu_milli == 2000
    assert by_name["team-a"].gpu_demand == Resources(gpu_milli=8000)


def test_what_if_for_a_new_quota(group, team_a, team_b):
    qa = QuotaFactory(group=group, tenant=team_a, gpu_max_gpu_milli=8000, **BIG)
    make_workload(qa, gpu_count=8, cpu_milli=0, memory_mib=0)
    rows = services.what_if(
        group, None, {"gpu_min_gpu_milli": 3000, "gpu_max_gpu_milli": 3000}, tenant=team_b
    )
    assert [(r.name, r.gpu_before.gpu_milli, r.gpu_after.gpu_milli) for r in rows] == [
        ("team-a", 8000, 8000),
        ("team-b", 0, 0),
    ]


def test_observer_is_told_after_commit(group, team_a, django_capture_on_commit_callbacks):
    seen: list[int] = []
    history.register_quota_change_observer(seen.append)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            services.create_quota(group=group, tenant=team_a)
    finally:
        history.unregister_quota_change_observer(seen.append)
    assert seen == [group.pk]


@pytest.mark.parametrize(
    ("_case", "selector", "message"),
    [
        ("too many labels", {f"k{i}": "v" for i in range(33)}, "At most 32 node labels (got 33)."),
        ("a value of 64 characters", {"pool": "p" * 64},
         "Label 'pool': the value has at most 63 characters (got 64)."),
    ],
)  # fmt: skip
def test_a_node_selector_follows_the_kubernetes_label_rules(
    _case: str, selector: dict[str, str], message: str
) -> None:
    # issue 12: every collection and string has a bound
    with pytest.raises(InvalidInput) as refused:
        services.create_group(name="inference", node_selector=selector)
    assert refused.value.fields == {"node_selector": [message]}
    assert not QuotaGroup.objects.filter(name="inference").exists()
