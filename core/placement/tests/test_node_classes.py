"""The placer's shortcuts for node-local policies (one node per class of identical node states, GPU-memory
slices on the cached path) choose exactly what the policy chooses over every feasible node."""

from __future__ import annotations

import random

import numpy as np
import pytest

from core.placement import (
    POLICIES,
    Assignment,
    ClusterState,
    PlacementRequest,
    Policy,
    TypicalPod,
    plan_placements,
)
from core.placement.filters import feasible_mask, preferred_subset
from core.placement.gpu_select import make_assignment
from core.placement.placer import node_local, place_one, representatives

from .builders import cluster, node


def _cluster() -> ClusterState:
    nodes = []
    for i in range(60):
        model, gmem = [("A100", 81920), ("T4", 15360), ("L40S", 46080)][i % 3]
        nodes.append(node(f"n{i:03d}", 8 if i % 10 else 0, model=model, gpu_mem=gmem, cpu=64000))
    return cluster(*nodes)


def _requests(n: int, seed: int) -> list[PlacementRequest]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.5:
            gpu = {"gpu_count": 1, "gpu_milli": rng.choice([250, 500]), "gpu_memory_mib": 8192}
        elif r < 0.8:
            gpu = {"gpu_count": rng.choice([1, 2, 4]), "gpu_milli": 1000}
        elif r < 0.9:
            gpu = {"gpu_count": 1, "gpu_milli": 300}
        else:
            gpu = {}
        out.append(
            PlacementRequest(str(i), cpu_milli=rng.choice([1000, 4000]), memory_mib=4096, **gpu)
        )
    return out


def _place_everywhere(
    state: ClusterState, r: PlacementRequest, policy: Policy, prio: np.ndarray
) -> Assignment | None:
    """place_one without the shortcuts: the policy sees every feasible node."""
    cand = np.flatnonzero(feasible_mask(state, r))
    if cand.size == 0:
        return None
    cand = preferred_subset(state, r, cand)
    i, gpus = policy.choose(state, r, cand, prio)
    a = make_assignment(state, i, r, gpus)
    state.apply(a)
    return a


@pytest.mark.parametrize("name", ["tessera", "fgd"])
def test_shortcuts_choose_what_the_policy_chooses_over_every_node(name: str) -> None:
    requests = _requests(900, seed=5)
    typical = (TypicalPod(1000, 500, 1, "", 0.5), TypicalPod(4000, 1000, 2, "", 0.5))
    fast, slow = _cluster(), _cluster()
    p_fast = POLICIES[name](typical=typical)
    p_slow = POLICIES[name](typical=typical)
    assert node_local(p_fast)
    prio = np.array(random.Random(1).sample(range(len(fast)), len(fast)), np.int64)
    placed = 0
    for r in requests:
        a = place_one(fast, r, p_fast, prio)
        b = _place_everywhere(slow, r, p_slow, prio)
        assert a == b
        placed += a is not None
    assert 300 < placed < 900  # the cluster fills: both ends of the run are exercised


def test_representatives_keep_the_lowest_priority_node_of_each_class() -> None:
    s = _cluster()
    cand = np.flatnonzero(s.has_gpu)
    prio = np.arange(len(s), dtype=np.int64)[::-1].copy()
    reps = representatives(s, cand, prio)
    # idle GPU nodes of one model are one class: the last one (lowest priority value) represents it
    assert [s.names[i] for i in reps] == ["n057", "n058", "n059"]
    assert all(prio[i] == prio[cand[s.row_class[cand] == s.row_class[i]]].min() for i in reps)


def test_row_classes_follow_apply_and_release() -> None:
    s = _cluster()
    before = s.row_class.copy()
    plan = plan_placements(s, _requests(1, seed=2), policy="tessera")
    work = s.copy()
    a = plan.placements[0]
    work.apply(a)
    i = work.index[a.node]
    assert work.row_class[i] != before[i]
    work.release(a)
    assert work.row_class[i] == before[i]
