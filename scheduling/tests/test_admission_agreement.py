"""The picker's preview and the scheduling cycle admit a request the same way (500 seeded random cases).

Each case draws a group (1–5 sibling quotas with random min / max / weight on both sides, lending or not),
random live workloads (placed and pending; slices, whole cards, CPU only; preemptible or not) and a request
(one workload or a gang). The preview is `quotas.admission.check_admission` on the group's snapshot
without the request (what the picker calls before anything is saved); the cycle is `decide` on the
cycle's own input: the usage summed per quota and side with the request pending at the head of the queue.
They must agree: the same refusal (code and sentence) or both admitting it. No database.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from core.placement import ClusterState, ReservationPolicy
from core.placement.tests.builders import node
from quotas.admission import AdmissionCode, check_admission
from quotas.resources import Resources, Side
from quotas.usage import (
    GroupCapacity,
    GroupSnapshot,
    QuotaSpec,
    aggregate,
    build_snapshot,
    usage_of,
)
from scheduling.models import Gang, Workload
from scheduling.services.decide import CycleInput, PendingWorkload, decide
from scheduling.services.snapshot import workload_request

CASES = 500
T0 = datetime(2026, 1, 1, tzinfo=UTC)
CARD_MIB = 40960
NODE_CPU, NODE_MEMORY = 64000, 262144
QUOTA_CODES = {code.value for code in AdmissionCode}


def _minimum(rng: random.Random, *, gpus: int, cpu: int, memory: int) -> Resources:
    """A min: often nothing guaranteed in a dimension, else up to half the group."""
    return Resources(
        gpu_milli=rng.choice((0, rng.randint(0, gpus // 2) * 1000)),
        gpu_memory_mib=rng.choice((0, rng.randint(0, gpus // 2) * CARD_MIB)),
        cpu_milli=rng.choice((0, rng.randint(0, cpu // 2))),
        memory_mib=rng.choice((0, rng.randint(0, memory // 2))),
    )


def _maximum(
    rng: random.Random, minimum: Resources, *, gpus: int, cpu: int, memory: int
) -> Resources:
    """A max ≥ min: sometimes the min itself (nothing to borrow), else up to the group or unbounded."""

    def one(low: int, high: int) -> int:
        roll = rng.random()
        return low if roll < 0.1 else 10**9 if roll < 0.4 else low + rng.randint(0, high)

    return Resources(
        one(minimum.gpu_milli, gpus * 1000),
        one(minimum.gpu_memory_mib, gpus * CARD_MIB),
        one(minimum.cpu_milli, cpu),
        one(minimum.memory_mib, memory),
    )


def _quota(rng: random.Random, quota_id: int, gpus: int, cpu: int, memory: int) -> QuotaSpec:
    minimum = {side: _minimum(rng, gpus=gpus, cpu=cpu, memory=memory) for side in Side}
    maximum = {
        side: _maximum(rng, minimum[side], gpus=gpus, cpu=cpu, memory=memory) for side in Side
    }
    weight = {side: Resources(*(rng.randint(1, 4) for _ in range(4))) for side in Side}
    return QuotaSpec(
        quota_id=quota_id,
        name=f"q{quota_id}",
        tenant_id=quota_id,
        tenant_slug=f"t{quota_id}",
        lend_idle_min=rng.random() < 0.7,
        min=minimum,
        max=maximum,
        weight=weight,
    )


def _workload(
    rng: random.Random, wid: int, quota_id: int, state: str, *, gang_id: int | None = None
) -> Workload:
    """An unsaved Workload row (the charge is the model's own: usage_of / workload_resources)."""
    shape = rng.random()
    if shape < 0.4:
        gpu = {"gpu_count": 1, "gpu_milli": rng.choice((100, 250, 500)), "gpu_memory_mib": 10240}
    elif shape < 0.8:
        gpu = {
            "gpu_count": rng.randint(1, 4),
            "gpu_milli": 1000,
            "whole_card_memory_mib": CARD_MIB,
        }
    else:
        gpu = {}
    w = Workload(
        pk=wid,
        quota_id=quota_id,
        tenant_id=quota_id,
        kind=rng.choice(("job_pod", "codespace")),
        name=f"w{wid}",
        state=state,
        cpu_milli=rng.randint(1, 16) * 500,
        memory_mib=rng.randint(1, 32) * 1024,
        preemptible=rng.random() < 0.7,
        priority=rng.randint(0, 5),
        **gpu,
    )
    if gang_id is not None:
        w.gang = Gang(pk=gang_id, name=f"gang{gang_id}", min_available=1)
    w.submitted_at = T0 + timedelta(seconds=wid)
    return w


def _case(seed: int) -> tuple[GroupSnapshot, ClusterState, list[Workload], list[Workload]]:
    """A random group: its snapshot of live workloads (without the request), an engine state, the
    pending workloads, and the request (one workload, or a gang's members)."""
    rng = random.Random(seed)
    gpu_nodes, cpu_nodes = rng.randint(1, 4), rng.randint(0, 2)
    nodes = [
        node(f"g{i}", 4, cpu=NODE_CPU, mem=NODE_MEMORY, gpu_mem=CARD_MIB) for i in range(gpu_nodes)
    ]
    nodes += [node(f"c{i}", 0, cpu=NODE_CPU, mem=NODE_MEMORY) for i in range(cpu_nodes)]
    gpus, cpu, memory = 4 * gpu_nodes, NODE_CPU * len(nodes), NODE_MEMORY * len(nodes)
    capacity = GroupCapacity(
        gpu=Resources(gpus * 1000, gpus * CARD_MIB, NODE_CPU * gpu_nodes, NODE_MEMORY * gpu_nodes),
        cpu=Resources(0, 0, NODE_CPU * cpu_nodes, NODE_MEMORY * cpu_nodes),
    )
    specs = [_quota(rng, q, gpus, cpu, memory) for q in range(1, rng.randint(1, 5) + 1)]
    live = [
        _workload(
            rng, wid, rng.randint(1, len(specs)), rng.choice(("placed", "running", "pending"))
        )
        for wid in range(1, rng.randint(0, 40) + 1)
    ]
    quota_id = rng.randint(1, len(specs))
    members = rng.randint(2, 3) if rng.random() < 0.3 else 1
    first = 1000
    request = [
        _workload(rng, first + i, quota_id, "pending", gang_id=99 if members > 1 else None)
        for i in range(members)
    ]
    for w in request:
        w.priority = 10  # the head of the cycle's queue
    snapshot = build_snapshot(
        group_id=1,
        group_name="pool",
        allow_overcommitted_min=False,
        capacity=capacity,
        specs=specs,
        workloads=[usage_of(w) for w in live],
        headroom=False,
    )
    state = ClusterState.from_nodes(nodes, ReservationPolicy())
    return snapshot, state, [w for w in live if w.state == "pending"], request


def _cycle_input(
    snapshot: GroupSnapshot, state: ClusterState, waiting: list[Workload], request: list[Workload]
) -> CycleInput:
    """What the cycle reads once the request is saved: everyone's usage summed, the request pending."""
    usages = [*snapshot.workloads, *(usage_of(w) for w in request)]
    summed = build_snapshot(
        group_id=snapshot.group_id,
        group_name=snapshot.group_name,
        allow_overcommitted_min=snapshot.allow_overcommitted_min,
        capacity=snapshot.capacity,
        specs=snapshot.specs,
        workloads=aggregate(usages),
        headroom=False,
    )
    gang = len(request) if len(request) > 1 else 0
    pending = [
        PendingWorkload(
            usage_of(w), workload_request(w), w.submitted_at, gang if w in request else 0
        )
        for w in [*request, *waiting]
    ]
    return CycleInput(pending=tuple(pending), quota=summed, cluster=state)


def test_the_preview_and_the_cycle_agree_on_random_groups_usages_and_requests() -> None:
    outcomes: dict[str, int] = {}
    for seed in range(CASES):
        snapshot, state, waiting, request = _case(seed)
        preview = check_admission(request if len(request) > 1 else request[0], snapshot)
        decision = decide(_cycle_input(snapshot, state, waiting, request))
        head = request[0].pk
        refusal = decision.waiting.get(head)
        refused_by_quota = refusal is not None and refusal.code in QUOTA_CODES
        assert preview.allowed is not refused_by_quota, (seed, preview, refusal)
        if refused_by_quota:
            assert refusal is not None
            assert (refusal.code, refusal.reason) == (preview.code, preview.reason), seed
            assert all(decision.waiting[w.pk].code == preview.code for w in request), seed
        outcomes[preview.code] = outcomes.get(preview.code, 0) + 1
    # The cases reach every rule, so the agreement is not only "both admit".
    assert set(outcomes) == {
        "admitted",
        "quota_max",
        "exceeds_capacity",
        "nonpreemptible_beyond_min",
        "quota_runtime",
    }, outcomes
