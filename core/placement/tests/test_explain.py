"""explain(): reasons a person understands, with counts and the largest slice that fits."""

from __future__ import annotations

from core.placement import Assignment, UnplacedReason, explain

from .builders import cluster, node, req


def test_feasible_request_has_no_explanation() -> None:
    assert explain(cluster(node("a", 1)), req("r", gpus=1, milli=500)) is None


def test_counts_each_constraint_and_reports_largest_slice() -> None:
    s = cluster(
        node("off", 2, schedulable=False),
        node("t4", 2, model="T4"),
        node("busy", 2, cpu=4000),
        node("full", 2),
    )
    s.apply(Assignment("x", "full", (0,), 1000, 40960, 0, 0))
    s.apply(Assignment("y", "full", (1,), 700, 1000, 0, 0))
    u = explain(s, req("r", cpu=8000, gpus=1, milli=500, gpu_models=("A100",)))
    assert u is not None
    assert u.reason is UnplacedReason.INSUFFICIENT_GPU
    assert u.failed_constraints == (
        ("cordoned", 1),
        ("GPU model", 1),
        ("CPU", 1),
        ("GPU capacity", 1),
    )
    assert u.largest_fitting_slice == (300, 39960)
    assert "No node of 4 can host 8000m CPU" in u.message
    assert "300m / 39960 MiB" in u.message


def test_reason_is_the_constraint_that_removed_the_last_nodes() -> None:
    s = cluster(node("a", 1, cpu=2000))
    u = explain(s, req("r", cpu=4000, gpus=1, milli=100))
    assert u is not None
    assert u.reason is UnplacedReason.INSUFFICIENT_CPU
    assert u.failed_constraints == (("CPU", 1),)
    assert u.largest_fitting_slice is None


def test_invalid_request_is_explained() -> None:
    u = explain(cluster(node("a", 1)), req("r", gpus=1, milli=1500))
    assert u is not None
    assert u.reason is UnplacedReason.INVALID_REQUEST
    assert "at most 1000" in u.message
