"""Timing of the quota hot paths on synthetic groups (not collected by pytest).

    DJANGO_SETTINGS_MODULE=portal.settings_test .venv/bin/python -m quotas.tests.bench_snapshot

Prints, per size, the time to build a snapshot with headroom, one admission check on it, and one reclaim
plan. Pure (no database): only the computation is timed.
"""

from __future__ import annotations

import random
import time


def run(quota_count: int, workload_count: int) -> str:
    from quotas.admission import check_request
    from quotas.reclaim import plan_reclaim
    from quotas.resources import Resources, Side
    from quotas.usage import GroupCapacity, QuotaSpec, WorkloadUsage, build_snapshot

    rnd = random.Random(1)
    specs = []
    for i in range(quota_count):
        maximum = Resources(rnd.randint(1, 64) * 1000, 10**7, 10**6, 10**7)
        specs.append(
            QuotaSpec(
                quota_id=i + 1,
                name=f"q{i:03d}",
                tenant_id=i + 1,
                tenant_slug=f"t{i}",
                lend_idle_min=True,
                min={Side.GPU: Resources(rnd.randint(0, 8) * 1000), Side.CPU: Resources()},
                max={Side.GPU: maximum, Side.CPU: Resources(0, 0, 10**6, 10**7)},
                weight={Side.GPU: maximum, Side.CPU: Resources(0, 0, 10**6, 10**7)},
            )
        )
    workloads = [
        WorkloadUsage(
            workload_id=j + 1,
            name=f"w{j}",
            kind="job_pod",
            quota_id=rnd.randint(1, quota_count),
            side=Side.GPU,
            resources=Resources(1000, 0, 1000, 1024),
            active=rnd.random() < 0.9,
        )
        for j in range(workload_count)
    ]
    capacity = GroupCapacity(
        gpu=Resources(workload_count * 1000, 10**9, 10**8, 10**9), cpu=Resources(0, 0, 10**7, 10**8)
    )
    start = time.perf_counter()
    snapshot = build_snapshot(
        group_id=1,
        group_name="bench",
        allow_overcommitted_min=True,
        capacity=capacity,
        specs=specs,
        workloads=workloads,
    )
    built = time.perf_counter() - start
    start = time.perf_counter()
    rounds = 20
    for _ in range(rounds):
        check_request(
            snapshot, rnd.randint(1, quota_count), Side.GPU, Resources(1000, 0, 1000, 1024)
        )
    admitted = (time.perf_counter() - start) / rounds
    pending = [w for w in workloads if not w.active][:4]
    start = time.perf_counter()
    plan_reclaim(snapshot, pending)
    planned = time.perf_counter() - start
    return (
        f"quotas={quota_count:4d} workloads={workload_count:5d}: snapshot {built * 1000:7.1f} ms, "
        f"admission {admitted * 1000:6.1f} ms, reclaim plan {planned * 1000:6.1f} ms"
    )


def main() -> None:
    import django

    django.setup()
    run(3, 100)  # warm-up
    for quota_count, workload_count in ((3, 100), (20, 1000), (100, 5000)):
        print(run(quota_count, workload_count))  # noqa: T201


if __name__ == "__main__":
    main()
