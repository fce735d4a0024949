"""Property tests of the reclaim planner on random groups (pure, no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.reclaim import plan_reclaim
from quotas.resources import Resources, Side, total
from quotas.usage import GroupCapacity, QuotaSpec, WorkloadUsage, build_snapshot

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _spec(quota_id: int, min_gpus: int, max_gpus: int) -> QuotaSpec:
    return QuotaSpec(
        quota_id=quota_id,
        name=f"q{quota_id}",
        tenant_id=quota_id,
        tenant_slug=f"t{quota_id}",
        lend_idle_min=True,
        min={Side.GPU: Resources(gpu_milli=min_gpus * 1000), Side.CPU: Resources()},
        max={Side.GPU: Resources(gpu_milli=max_gpus * 1000), Side.CPU: Resources()},
        weight={Side.GPU: Resources(gpu_milli=max_gpus * 1000), Side.CPU: Resources()},
    )


@st.composite
def groups(draw):  # type: ignore[no-untyped-def]
    quota_count = draw(st.integers(min_value=2, max_value=4))
    capacity = draw(st.integers(min_value=4, max_value=16))
    specs = []
    for quota_id in range(1, quota_count + 1):
        maximum = draw(st.integers(min_value=1, max_value=capacity))
        specs.append(_spec(quota_id, draw(st.integers(min_value=0, max_value=maximum)), maximum))
    workloads = []
    next_id = 1
    used = 0
    for gang_id in range(1, draw(st.integers(min_value=0, max_value=10)) + 1):
        quota_id = draw(st.integers(min_value=1, max_value=quota_count))
        is_gang = draw(st.booleans())
        members = draw(st.integers(min_value=2, max_value=4)) if is_gang else 1
        if used + members > capacity:
            continue
        priority = draw(st.integers(min_value=0, max_value=3))
        started = T0 + timedelta(minutes=draw(st.integers(min_value=0, max_value=100)))
        for _ in range(members):
            workloads.append(
                WorkloadUsage(
                    workload_id=next_id,
                    name=f"w{next_id}",
                    kind="job_pod",
                    quota_id=quota_id,
                    side=Side.GPU,
                    resources=Resources(gpu_milli=1000),
                    active=True,
                    priority=priority,
                    preemptible=draw(st.booleans()) or draw(st.booleans()),
                    gang_id=gang_id if is_gang else None,
                    gang_name=f"g{gang_id}" if is_gang else "",
                    started_at=started,
                )
            )
            next_id += 1
        used += members
    # the claimant: mostly the quota using least (the usual "wants its min back" case), sometimes any
    by_use = sorted(
        range(1, quota_count + 1), key=lambda q: sum(1 for w in workloads if w.quota_id == q)
    )
    claimant_quota = by_use[0] if draw(st.integers(0, 3)) else draw(st.sampled_from(by_use))
    request = draw(st.integers(min_value=1, max_value=3))
    if draw(st.booleans()):  # the claim is within the claimant's min
        index = claimant_quota - 1
        floor = max(request, specs[index].min[Side.GPU].gpu_milli // 1000)
        specs[index] = _spec(
            claimant_quota, floor, max(floor, specs[index].max[Side.GPU].gpu_milli // 1000)
        )
    claim = WorkloadUsage(
        workload_id=10_000,
        name="claim",
        kind="codespace",
        quota_id=claimant_quota,
        side=Side.GPU,
        resources=Resources(gpu_milli=1000 * request),
        active=False,
    )
    snapshot = build_snapshot(
        group_id=1,
        group_name="g",
        allow_overcommitted_min=True,
        capacity=GroupCapacity(gpu=Resources(gpu_milli=capacity * 1000), cpu=Resources()),
        specs=specs,
        workloads=[*workloads, claim],
        headroom=False,
    )
    return snapshot, claim


@settings(max_examples=300, deadline=None)
@given(groups())
def test_property_victims_are_whole_preemptible_units_of_other_quotas_over_their_share(case):
    snapshot, claim = case
    plan = plan_reclaim(snapshot, claim)
    active = [w for w in snapshot.workloads if w.active]
    chosen = set(plan.workload_ids)
    for victim in plan.victims:
        members = [w for w in active if w.workload_id in victim.workload_ids]
        # never non-preemptible, never the claimant's own quota
        assert all(w.preemptible for w in members)
        assert victim.quota_id != claim.quota_id
        # over its runtime share before the reclaim
        assert snapshot.quota(victim.quota_id).gpu.over_runtime.gpu_milli > 0
        if victim.gang_id is not None:
            # whole gang: every active member of that gang is in the victim, nothing of it left running
            gang = {w.workload_id for w in active if w.gang_id == victim.gang_id}
            assert gang == set(victim.workload_ids)
    # a workload is chosen at most once
    assert len(chosen) == len(plan.workload_ids)
    claim_outcome = plan.claims[0]
    if plan.victims:
        assert claim_outcome.satisfied
        assert total(v.freed for v in plan.victims).gpu_milli >= claim_outcome.needed.gpu_milli
    if not claim_outcome.satisfied:
        assert plan.victims == ()


@settings(max_examples=200, deadline=None)
@given(groups())
def test_property_plan_is_deterministic(case):
    snapshot, claim = case
    assert plan_reclaim(snapshot, claim) == plan_reclaim(snapshot, claim)
