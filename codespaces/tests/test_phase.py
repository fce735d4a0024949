"""The one derivation of a codespace's observed phase (codespaces.phase, issue 24): pure, no database."""

from __future__ import annotations

import pytest

from codespaces.choices import TRANSITIONS, DesiredState
from codespaces.choices import CodespaceState as S
from codespaces.phase import (
    WORKLOAD_STATES,
    Observed,
    PlacementFacts,
    WorkloadFacts,
    desired_for,
    observe,
    observed_phase,
    path,
)
from scheduling.choices import WorkloadState

D = DesiredState
WAITING = WorkloadFacts(
    state="pending", pending_reason="quota full", pending_code="quota_max", queue_position=2
)
ON_GPU1 = PlacementFacts(node_name="h100-a", gpu_names="gpu1", gpu_model="H100")


def test_the_phase_module_spells_the_workload_states_of_scheduling() -> None:
    assert set(WORKLOAD_STATES) == set(WorkloadState.values)


@pytest.mark.parametrize(
    ("desired", "workload_state", "phase"),
    [
        (D.RUNNING, None, S.QUEUED),
        (D.RUNNING, "pending", S.QUEUED),
        (D.RUNNING, "placed", S.STARTING),
        (D.RUNNING, "running", S.RUNNING),
        (D.RUNNING, "failed", S.FAILED),
        (D.RUNNING, "released", S.STOPPED),  # reclaimed by the scheduler
        (D.RUNNING, "succeeded", S.STOPPED),
        (D.STOPPED, None, S.STOPPED),
        (D.STOPPED, "pending", S.STOPPING),
        (D.STOPPED, "placed", S.STOPPING),
        (D.STOPPED, "running", S.STOPPING),
        (D.STOPPED, "released", S.STOPPED),
        (D.STOPPED, "failed", S.STOPPED),
        (D.STOPPED, "succeeded", S.STOPPED),
        (D.DELETED, None, S.DELETED),
        (D.DELETED, "pending", S.DELETING),
        (D.DELETED, "placed", S.DELETING),
        (D.DELETED, "running", S.DELETING),
        (D.DELETED, "released", S.DELETED),
        (D.DELETED, "failed", S.DELETED),
        (D.DELETED, "succeeded", S.DELETED),
    ],
)
def test_observed_phase_of_every_desired_and_workload_state(
    desired: str, workload_state: str | None, phase: str
) -> None:
    assert observed_phase(desired, workload_state) == phase


def test_a_queued_codespace_shows_why_it_waits_and_nothing_of_a_placement() -> None:
    assert observe(D.RUNNING, WAITING, ON_GPU1) == Observed(
        phase=S.QUEUED, pending_reason="quota full", pending_code="quota_max", queue_position=2
    )


def test_a_running_codespace_shows_where_it_runs_and_no_waiting_reason() -> None:
    workload = WorkloadFacts(state="running", pending_reason="stale", queue_position=4)
    observed = observe(D.RUNNING, workload, ON_GPU1)
    assert observed == Observed(
        phase=S.RUNNING, node_name="h100-a", gpu_names="gpu1", gpu_model_placed="H100"
    )
    assert observed.location == "h100-a / gpu1"


def test_a_failed_codespace_shows_its_workloads_failure_reason() -> None:
    workload = WorkloadFacts(state="failed", failure_reason="image pull failed")
    assert observe(D.RUNNING, workload, None) == Observed(
        phase=S.FAILED, failure_reason="image pull failed"
    )


def test_a_stopped_codespace_shows_neither_location_nor_failure() -> None:
    workload = WorkloadFacts(state="failed", failure_reason="image pull failed")
    assert observe(D.STOPPED, workload, ON_GPU1) == Observed(phase=S.STOPPED)
    assert observe(D.RUNNING, None, None) == Observed(phase=S.QUEUED)


def test_a_cpu_only_placement_has_a_node_and_no_gpu() -> None:
    observed = observe(D.RUNNING, WorkloadFacts(state="placed"), PlacementFacts("cpu-1"))
    assert (observed.phase, observed.location, observed.gpu_names) == (S.STARTING, "cpu-1", "")


@pytest.mark.parametrize(
    ("phase", "desired"),
    [
        (S.QUEUED, D.RUNNING),
        (S.PLACED, D.RUNNING),
        (S.STARTING, D.RUNNING),
        (S.RUNNING, D.RUNNING),
        (S.FAILED, D.RUNNING),
        (S.STOPPING, D.STOPPED),
        (S.STOPPED, D.STOPPED),
        (S.DELETING, D.DELETED),
        (S.DELETED, D.DELETED),
    ],
)
def test_each_phase_records_the_desired_state_it_implies(phase: str, desired: str) -> None:
    assert desired_for(phase) == desired


@pytest.mark.parametrize(
    ("from_phase", "to_phase", "steps"),
    [
        (S.QUEUED, S.STARTING, (S.PLACED, S.STARTING)),
        (S.QUEUED, S.RUNNING, (S.PLACED, S.STARTING, S.RUNNING)),
        (S.PLACED, S.RUNNING, (S.STARTING, S.RUNNING)),
        (S.STARTING, S.RUNNING, (S.RUNNING,)),
        (S.RUNNING, S.QUEUED, (S.QUEUED,)),
        (S.RUNNING, S.STOPPED, (S.STOPPING, S.STOPPED)),
        (S.QUEUED, S.STOPPED, (S.STOPPING, S.STOPPED)),
        (S.QUEUED, S.FAILED, (S.FAILED,)),
        (S.RUNNING, S.STARTING, (S.QUEUED, S.PLACED, S.STARTING)),
        (S.DELETING, S.DELETED, (S.DELETED,)),
        (S.RUNNING, S.RUNNING, ()),
        (S.DELETED, S.RUNNING, ()),
    ],
)
def test_the_timeline_walks_to_the_observed_phase_along_legal_moves(
    from_phase: str, to_phase: str, steps: tuple[str, ...]
) -> None:
    assert path(from_phase, to_phase) == steps
    previous = from_phase
    for step in steps:
        assert step in TRANSITIONS[previous], (previous, step)
        previous = step


def test_every_walk_is_legal_or_empty() -> None:
    for from_phase in S.values:
        for to_phase in S.values:
            previous = from_phase
            for step in path(from_phase, to_phase):
                assert step in TRANSITIONS[previous], (from_phase, to_phase, previous, step)
                previous = step
            assert previous in (from_phase, to_phase)
