"""Invariants, property-tested with hypothesis over random clusters and request batches."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.placement import (
    POLICIES,
    ClusterState,
    GpuSpec,
    NodeSpec,
    PlacementRequest,
    TopologyPolicy,
    plan_placements,
)

MODELS = ("A100", "T4", "L4")


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeSpec]:
    n = draw(st.integers(1, 6))
    nodes = []
    for i in range(n):
        g = draw(st.integers(0, 8))
        model = draw(st.sampled_from(MODELS))
        gpus = tuple(
            GpuSpec(
                j,
                model,
                draw(st.sampled_from((16384, 40960))),
                numa_node=j * 2 // max(g, 1),
                nvlink_group=j // 2,
                healthy=draw(st.booleans()) or draw(st.booleans()),
            )
            for j in range(g)
        )
        labels = (("zone", draw(st.sampled_from("ab"))),)
        nodes.append(
            NodeSpec(
                f"n{i}",
                draw(st.integers(2000, 64000)),
                draw(st.integers(4096, 262144)),
                gpus,
                model if g else "",
                labels,
                draw(st.integers(0, 9)) > 0,
            )
        )
    return nodes


@st.composite
def requests(draw: st.DrawFn) -> list[PlacementRequest]:
    out = []
    for i in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(("cpu", "slice", "whole")))
        count, milli = {"cpu": (0, 0), "slice": (1, draw(st.integers(1, 999))), "whole": (0, 1000)}[
            kind
        ]
        if kind == "whole":
            count = draw(st.integers(1, 4))
        out.append(
            PlacementRequest(
                f"r{i}",
                draw(st.integers(0, 16000)),
                draw(st.integers(0, 65536)),
                count,
                milli,
                draw(st.sampled_from((0, 0, 4096, 20000))) if kind == "slice" else 0,
                tuple(draw(st.lists(st.sampled_from(MODELS), max_size=2))) if kind != "cpu" else (),
                (("zone", "a"),) if draw(st.integers(0, 4)) == 0 else (),
                draw(st.sampled_from(list(TopologyPolicy))),
                draw(st.integers(0, 2)),
            )
        )
    return out


def _check_invariants(nodes: list[NodeSpec], reqs: list[PlacementRequest], policy: str) -> None:
    state = ClusterState.from_nodes(nodes)
    plan = plan_placements(state, reqs, policy=policy)
    by_id = {r.request_id: r for r in reqs}
    spec = {n.name: n for n in nodes}
    ids = [a.request_id for a in plan.placements] + [u.request_id for u in plan.unplaced]
    assert sorted(ids) == sorted(by_id)
    work = state.copy()
    for a in plan.placements:
        r, n = by_id[a.request_id], spec[a.node]
        assert n.schedulable
        assert set(r.node_labels) <= set(n.labels)
        if r.is_cpu_only:
            assert a.gpu_indices == ()
        else:
            assert len(a.gpu_indices) == r.gpu_count
            assert not r.gpu_models or n.gpu_model in r.gpu_models
            for j in a.gpu_indices:
                assert n.gpus[j].healthy
                if r.is_whole_gpu:
                    assert work.gpu_free[work.index[a.node], j] == 1000
        work.apply(a)  # raises if anything is over capacity
    assert (work.cpu_free >= 0).all()
    assert (work.mem_free >= 0).all()
    assert (work.gpu_free >= 0).all()
    assert (work.gpu_free <= 1000).all()
    assert (work.gpu_mem_free >= 0).all()
    # place-then-release is the identity
    for a in reversed(plan.placements):
        work.release(a)
    for name in ("cpu_free", "mem_free", "gpu_free", "gpu_mem_free", "tags", "whole_free"):
        assert np.array_equal(getattr(work, name), getattr(state, name)), name
    assert work.allocated_gpu_milli == 0
    # same input -> same plan
    assert plan_placements(state, reqs, policy=policy) == plan


@settings(max_examples=60, deadline=None)
@given(clusters(), requests(), st.sampled_from(sorted(POLICIES)))
def test_invariants_hold_for_every_policy(
    nodes: list[NodeSpec], reqs: list[PlacementRequest], policy: str
) -> None:
    _check_invariants(nodes, reqs, policy)


@settings(max_examples=40, deadline=None)
@given(clusters(), requests())
def test_tessera_invariants(nodes: list[NodeSpec], reqs: list[PlacementRequest]) -> None:
    _check_invariants(nodes, reqs, "tessera")
