"""Fixtures of the telemetry app (registered in the root conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduling.telemetry.models import Source
from scheduling.telemetry.samples import MinuteMetrics, Share

T0 = datetime(2026, 11, 2, 10, 30, tzinfo=UTC)


@dataclass
class TelemetryCluster:
    group: Any
    nodes: dict[str, Any]
    quotas: dict[str, Any]
    workloads: dict[str, Any]


class FixedMetrics:
    """A metrics source with fixed SM % per workload name; GPU % = allocation-weighted sum."""

    source = Source.SIMULATED

    def __init__(self, by_name: dict[str, float]) -> None:
        self.by_name = by_name

    def measure(self, minute: datetime, shares: Any, gpus: Any) -> MinuteMetrics:
        out = MinuteMetrics()
        for share in shares:
            assert isinstance(share, Share)
            util = self.by_name.get(share.workload_name)
            if util is None:
                continue
            out.workload_utilization[share.workload_id] = util
            out.workload_memory_mib[share.workload_id] = 1000
            out.gpu_utilization[share.gpu_id] = (
                out.gpu_utilization.get(share.gpu_id, 0.0) + util * share.gpu_milli / 1000
            )
        return out


FIXED = {"cs-busy": 80.0, "cs-idle": 2.0, "train": 90.0, "half": 50.0}


@pytest.fixture
def telemetry_cluster(team_a: Any, team_b: Any) -> TelemetryCluster:
    """Pool a100: n1 (2 × A100), n2 (2 × A100, GPU 1 unhealthy). team-a: two 25 % codespaces on n1/gpu0
    (cs-busy, cs-idle) and a 50 % job on n2/gpu0 (half); team-b: a whole-GPU training job on n1/gpu1
    (train) and a pending whole-GPU job (waiting). Quotas: team-a min 1 / max 2 GPUs, team-b min 0.5 /
    max 3. Waits (submit → placed): cs-busy 60 s, half 120 s, train 300 s."""
    from scheduling.telemetry.tests.builders import (
        make_group,
        make_node,
        make_quota,
        make_workload,
        place,
    )

    group = make_group("a100")
    n1 = make_node("n1")
    n2 = make_node("n2", unhealthy=(1,))
    qa = make_quota(group, team_a)
    qb = make_quota(group, team_b)
    type(qa).objects.filter(pk=qa.pk).update(gpu_min_gpu_milli=1000, gpu_max_gpu_milli=2000)
    type(qb).objects.filter(pk=qb.pk).update(gpu_min_gpu_milli=500, gpu_max_gpu_milli=3000)
    ago = lambda minutes: T0 - timedelta(minutes=minutes)  # noqa: E731
    cs_busy = make_workload(
        qa,
        "cs-busy",
        kind="codespace",
        profile="development",
        gpu_milli=250,
        gpu_memory_mib=20480,
        submitted_at=ago(3),
        placed_at=ago(2),
    )
    cs_idle = make_workload(
        qa,
        "cs-idle",
        kind="codespace",
        profile="development",
        gpu_milli=250,
        gpu_memory_mib=20480,
    )
    half = make_workload(
        qa, "half", gpu_milli=500, gpu_memory_mib=40960, submitted_at=ago(30), placed_at=ago(28)
    )
    train = make_workload(qb, "train", submitted_at=ago(10), placed_at=ago(5))
    waiting = make_workload(qb, "waiting", state="pending")
    place(cs_busy, n1, [(0, 250, 20480)])
    place(cs_idle, n1, [(0, 250, 20480)])
    place(train, n1, [(1, 1000, 81920)])
    place(half, n2, [(0, 500, 40960)])
    return TelemetryCluster(
        group=group,
        nodes={"n1": n1, "n2": n2},
        quotas={"team-a": qa, "team-b": qb},
        workloads={w.name: w for w in (cs_busy, cs_idle, half, train, waiting)},
    )
