"""What a workload is charged to its quota (issue item 1): a whole card charges its memory.

Before placement a whole card charges the largest memory among the models it may be placed on in its pool;
once placed, the memory of the card it holds. A quota's "used" equals the sum over its active placements in
every dimension.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

import pytest
from django.apps import apps
from django.db.models import Sum

from quotas.resources import Resources
from quotas.usage import group_snapshot
from scheduling import services
from scheduling.choices import WorkloadState
from scheduling.inventory import sync_inventory_rows
from scheduling.models import Placement, PlacementGpu, Workload
from scheduling.tests.factories import BIG, gpu_node, make_group, make_quota

pytestmark = pytest.mark.django_db

GIB = 1024


def submit(quota: Any, name: str, **kw: Any) -> Workload:
    kw.setdefault("cpu_milli", 1000)
    kw.setdefault("memory_mib", 1024)
    return services.submit_workload(
        tenant=quota.tenant, quota=quota, kind="job_pod", name=name, **kw
    )


def placements_sum(quota: Any) -> Resources:
    """The sum over the quota's active placements, in every dimension."""
    active = Placement.objects.filter(workload__quota=quota, released_at__isnull=True)
    node = active.aggregate(c=Sum("cpu_milli"), m=Sum("memory_mib"))
    gpu = PlacementGpu.objects.filter(placement__in=active).aggregate(
        g=Sum("gpu_milli"), m=Sum("gpu_memory_mib")
    )
    return Resources(
        gpu_milli=int(gpu["g"] or 0),
        gpu_memory_mib=int(gpu["m"] or 0),
        cpu_milli=int(node["c"] or 0),
        memory_mib=int(node["m"] or 0),
    )


@pytest.fixture
def h100_quota() -> Any:
    """A team at max 110 GiB GPU memory on a pool of four whole H100 80 GiB."""
    sync_inventory_rows([gpu_node("h100-a", "H100", 80)])
    return make_quota(make_group(), name="team-a", gpu_max_gpu_memory_mib=110 * GIB)


def test_four_whole_80gib_cards_are_refused_under_a_110gib_gpu_memory_max(h100_quota: Any) -> None:
    # given a quota at max 110 GiB GPU memory and four free H100 80 GiB
    # when a job asks for the four whole cards
    w = submit(h100_quota, "four-whole", gpu_count=4, gpu_milli=1000)
    services.run_cycle(h100_quota.group_id)
    # then it waits on the quota max (320 GiB > 110 GiB), as two 60 GiB slices would
    w.refresh_from_db()
    assert w.state == WorkloadState.PENDING
    assert w.pending_code == "quota_max"
    assert "GPU memory" in w.pending_reason
    assert not Placement.objects.filter(workload__quota=h100_quota).exists()
    pending = group_snapshot(h100_quota.group).quota(h100_quota.pk).gpu.pending
    assert pending.gpu_memory_mib == 4 * 80 * GIB


def test_two_60gib_slices_and_whole_cards_are_refused_alike(h100_quota: Any) -> None:
    # given one 60 GiB slice running
    first = submit(h100_quota, "slice-1", gpu_count=1, gpu_milli=500, gpu_memory_mib=60 * GIB)
    services.run_cycle(h100_quota.group_id)
    first.refresh_from_db()
    assert first.state in (WorkloadState.PLACED, WorkloadState.RUNNING)
    # when a second slice and a whole card (80 GiB) are submitted
    second = submit(h100_quota, "slice-2", gpu_count=1, gpu_milli=500, gpu_memory_mib=60 * GIB)
    whole = submit(h100_quota, "whole", gpu_count=1, gpu_milli=1000)
    services.run_cycle(h100_quota.group_id)
    # then both wait on the quota max: 60 + 60 and 60 + 80 GiB exceed 110 GiB
    for w in (second, whole):
        w.refresh_from_db()
        assert (w.state, w.pending_code) == (WorkloadState.PENDING, "quota_max")


def test_used_equals_the_sum_over_active_placements_in_every_dimension(
    h100_quota: Any, api_as: Any, operator: Any
) -> None:
    # given one whole H100 and one slice placed
    whole = submit(h100_quota, "whole", gpu_count=1, gpu_milli=1000, cpu_milli=4000)
    services.run_cycle(h100_quota.group_id)
    whole.refresh_from_db()
    assert whole.state in (WorkloadState.PLACED, WorkloadState.RUNNING)
    h100_quota.gpu_max_gpu_memory_mib = BIG
    h100_quota.save()
    part = submit(h100_quota, "part", gpu_count=1, gpu_milli=250, gpu_memory_mib=20 * GIB)
    services.run_cycle(h100_quota.group_id)
    part.refresh_from_db()
    assert part.state in (WorkloadState.PLACED, WorkloadState.RUNNING)
    # when the quota's use is read from the snapshot and from the API
    used = group_snapshot(h100_quota.group).quota(h100_quota.pk).gpu.used
    api_used = api_as(operator).get(f"/api/v1/quotas/{h100_quota.pk}/").json()["status"]["gpu"]
    # then both equal the placements' sum in every dimension: the whole card charges its 80 GiB
    expected = placements_sum(h100_quota)
    assert expected == Resources(
        gpu_milli=1250, gpu_memory_mib=100 * GIB, cpu_milli=5000, memory_mib=2048
    )
    assert used == expected
    assert api_used["used"] == expected.as_dict()


def test_pending_whole_card_charges_the_largest_allowed_model_then_the_card_it_lands_on() -> None:
    # given a pool with an A100 40 GiB node (four cards) and an H100 80 GiB node whose cards are taken
    sync_inventory_rows([gpu_node("a100-a", "A100", 40), gpu_node("h100-a", "H100", 80)])
    quota = make_quota(make_group())
    filler = submit(quota, "filler", gpu_count=4, gpu_milli=1000, gpu_models=["H100"])
    services.run_cycle(quota.group_id)
    filler.refresh_from_db()
    assert filler.state in (WorkloadState.PLACED, WorkloadState.RUNNING)
    # when a whole card with no model restriction and one restricted to A100 are submitted
    anywhere = submit(quota, "anywhere", gpu_count=1, gpu_milli=1000)
    a100 = submit(quota, "a100", gpu_count=1, gpu_milli=1000, gpu_models=["A100"])
    # then while pending they charge the largest card they may land on (80 and 40 GiB)
    pending = group_snapshot(quota.group).quota(quota.pk).gpu.pending
    assert pending.gpu_memory_mib == (80 + 40) * GIB
    # and once placed (only A100 cards are free), the A100's 40 GiB each
    services.run_cycle(quota.group_id)
    for w in (anywhere, a100):
        w.refresh_from_db()
        assert w.state in (WorkloadState.PLACED, WorkloadState.RUNNING)
    usage = group_snapshot(quota.group).quota(quota.pk).gpu
    assert usage.pending == Resources()
    assert usage.used.gpu_memory_mib == (4 * 80 + 2 * 40) * GIB
    assert usage.used == placements_sum(quota)


def test_requeued_whole_card_charges_the_largest_allowed_model_again() -> None:
    # given a whole card placed on an A100 (the H100s are taken)
    sync_inventory_rows([gpu_node("a100-a", "A100", 40), gpu_node("h100-a", "H100", 80)])
    quota = make_quota(make_group())
    filler = submit(quota, "filler", gpu_count=4, gpu_milli=1000, gpu_models=["H100"])
    services.run_cycle(quota.group_id)
    w = submit(quota, "anywhere", gpu_count=1, gpu_milli=1000)
    services.run_cycle(quota.group_id)
    w.refresh_from_db()
    assert w.state in (WorkloadState.PLACED, WorkloadState.RUNNING)
    # when the H100 job ends and the card's workload is requeued
    services.release_workload(filler.pk, reason="done")
    services.requeue_workloads([w.pk], reason="drain", code="requeued")
    # then the pending workload charges 80 GiB again (it may land on an H100 now)
    usage = group_snapshot(quota.group).quota(quota.pk).gpu
    assert usage.pending.gpu_memory_mib == 80 * GIB
    assert usage.used == Resources()


def test_preview_refuses_whole_cards_beyond_the_gpu_memory_max(h100_quota: Any) -> None:
    # given a quota at max 110 GiB GPU memory
    # when the picker previews two whole H100s
    preview = services.preview_request(
        h100_quota, cpu_milli=1000, memory_mib=1024, gpu_count=2, gpu_milli=1000
    )
    # then it is refused on the quota max, as the cycle would
    assert (preview.starts_now, preview.code) == (False, "quota_max")
    assert not Workload.objects.exists()


def test_migration_charges_live_whole_cards_made_before_the_field() -> None:
    # given a placed whole card and a pending one written before whole_card_memory_mib existed (0)
    migration = importlib.import_module("scheduling.migrations.0005_workload_whole_card_memory")
    sync_inventory_rows([gpu_node("a100-a", "A100", 40), gpu_node("h100-a", "H100", 80)])
    quota = make_quota(make_group())
    placed = submit(quota, "placed", gpu_count=2, gpu_milli=1000, gpu_models=["A100"])
    services.run_cycle(quota.group_id)
    pending = submit(quota, "pending", gpu_count=1, gpu_milli=1000, gpu_models=["H100", "A100"])
    Workload.objects.update(whole_card_memory_mib=0)
    # when the migration's backfill runs
    migration.charge_live_whole_cards(apps, None)
    # then the placed one is charged the cards it holds, the pending one the largest it allows
    placed.refresh_from_db()
    pending.refresh_from_db()
    assert placed.state in (WorkloadState.PLACED, WorkloadState.RUNNING)
    assert placed.whole_card_memory_mib == 40 * GIB
    assert pending.whole_card_memory_mib == 80 * GIB


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_used_equals_the_placements_sum_after_any_sequence_of_submits_cycles_and_requeues(
    seed: int,
) -> None:
    # given a pool of A100 40 GiB and H100 80 GiB cards and two quotas
    rng = random.Random(seed)
    sync_inventory_rows([gpu_node("a100-a", "A100", 40), gpu_node("h100-a", "H100", 80)])
    group = make_group()
    quotas = [make_quota(group, name=f"q{i}") for i in range(2)]
    for step in range(30):
        # when slices, whole cards (any model or one), cycles, requeues and releases happen in any order
        action = rng.choice(["slice", "whole", "whole", "cycle", "requeue", "release"])
        quota = rng.choice(quotas)
        if action == "slice":
            submit(quota, f"s{step}", gpu_count=1, gpu_milli=rng.choice([250, 500]),
                   gpu_memory_mib=rng.choice([10, 20]) * GIB)  # fmt: skip
        elif action == "whole":
            models = rng.choice([[], ["A100"], ["H100"]])
            submit(quota, f"w{step}", gpu_count=rng.choice([1, 2]), gpu_milli=1000,
                   gpu_models=models)  # fmt: skip
        elif action == "cycle":
            services.run_cycle(group.pk)
        else:
            active = list(
                Workload.objects.filter(state__in=[WorkloadState.PLACED, WorkloadState.RUNNING])
                .order_by("pk")
                .values_list("pk", flat=True)
            )
            if active:
                victim = rng.choice(active)
                if action == "requeue":
                    services.requeue_workloads([victim], reason="drain", code="requeued")
                else:
                    services.release_workload(victim, reason="done")
        # then every quota's used equals the sum over its active placements, in every dimension
        snapshot = group_snapshot(group)
        for q in quotas:
            assert snapshot.quota(q.pk).gpu.used == placements_sum(q), (seed, step, action)
