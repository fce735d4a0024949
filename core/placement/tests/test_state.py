"""ClusterState: construction, apply/release, read helpers, memory."""

from __future__ import annotations

import pytest

from core.placement import Assignment, ClusterState, ReservationPolicy
from core.placement.filters import fit_counts

from .builders import cluster, node, req


def test_empty_state_has_everything_free() -> None:
    s = cluster(node("n1", 2), node("c1"))
    assert s.totals()["gpu_milli"] == 2000
    assert s.totals()["gpu_milli_allocated"] == 0
    assert s.node_free("n1")["gpus"] == [(0, 1000, 40960, True), (1, 1000, 40960, True)]
    assert s.largest_free_slice() == (1000, 40960)


def test_apply_then_release_restores_every_array() -> None:
    s = cluster(node("n1", 2))
    before = s.copy()
    a = Assignment("r", "n1", (1,), 300, 8192, 2000, 4096)
    s.apply(a)
    assert s.node_free("n1")["gpus"][1] == (1, 700, 32768, True)
    assert s.allocated_gpu_milli == 300
    s.release(a)
    for name in ("cpu_free", "mem_free", "gpu_free", "gpu_mem_free", "tags", "whole_free"):
        assert (getattr(s, name) == getattr(before, name)).all(), name
    assert s.allocated_gpu_milli == 0


def test_whole_gpu_takes_all_memory_and_needs_a_free_gpu() -> None:
    s = cluster(node("n1", 2))
    s.apply(Assignment("a", "n1", (0,), 1000, 40960, 0, 0))
    assert s.node_free("n1")["gpus"][0] == (0, 0, 0, True)
    with pytest.raises(ValueError, match="not completely free"):
        s.apply(Assignment("b", "n1", (0,), 1000, 40960, 0, 0))


@pytest.mark.parametrize(
    "assignment",
    [
        Assignment("x", "n1", (0,), 500, 50000, 0, 0),  # GPU memory
        Assignment("x", "n1", (), 0, 0, 64000, 0),  # CPU
        Assignment("x", "n1", (), 0, 0, 0, 10**9),  # memory
        Assignment("x", "n1", (5,), 100, 0, 0, 0),  # no such GPU
        Assignment("x", "n1", (1,), 100, 0, 0, 0),  # unhealthy
        Assignment("x", "nope", (), 0, 0, 0, 0),  # unknown node
    ],
)
def test_apply_rejects_what_does_not_fit(assignment: Assignment) -> None:
    s = cluster(node("n1", 2, unhealthy=(1,)))
    with pytest.raises(ValueError):
        s.apply(assignment)


def test_release_of_something_never_applied_is_rejected() -> None:
    s = cluster(node("n1", 1))
    with pytest.raises(ValueError):
        s.release(Assignment("x", "n1", (0,), 500, 0, 0, 0))


def test_reservation_limits_cpu_only_work_on_gpu_nodes() -> None:
    s = cluster(node("g", 1, cpu=10000), reservation=ReservationPolicy(0.5, 0.0))
    s.apply(Assignment("a", "g", (), 0, 0, 5000, 0))
    with pytest.raises(ValueError, match="reserved"):
        s.apply(Assignment("b", "g", (), 0, 0, 1000, 0))
    s.apply(Assignment("c", "g", (0,), 500, 0, 4000, 0))  # GPU work may use the reserved share


def test_fit_counts_per_node() -> None:
    s = cluster(node("n1", 2, cpu=8000), node("n2", 1, model="T4"))
    r = req("r", cpu=1000, gpus=1, milli=300, gpu_models=("A100",))
    assert fit_counts(s, r) == {"n1": 6}
    whole = req("w", cpu=1000, gpus=2, milli=1000)
    assert fit_counts(s, whole) == {"n1": 1}


def test_state_for_5000_nodes_by_8_gpus_is_under_10_mb() -> None:
    nodes = [node(f"n{i}", 8) for i in range(5000)]
    s = ClusterState.from_nodes(nodes)
    assert s.nbytes() < 10_000_000


def test_copy_is_independent() -> None:
    s = cluster(node("n1", 1))
    c = s.copy()
    c.apply(Assignment("a", "n1", (0,), 500, 0, 0, 0))
    assert s.allocated_gpu_milli == 0
    assert c.uid != s.uid
