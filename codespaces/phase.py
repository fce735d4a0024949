"""What a codespace *is* right now, derived from what its owner wants and what its workload does.

A codespace stores its desired state (running / stopped / deleted: `Codespace.desired_state`, written by
the user's actions and the idle policy) and its timeline. Everything the scheduler decides lives on the
scheduling workload and its placement: whether it waits and why (reason, code, queue position), where it
runs (node, GPUs, model), why it failed. `observe` is the ONE function that turns those into what pages,
the API, the auditor and the idle policy show; nothing copies them onto the codespace.

Pure (no database, no Django models): the callers read the facts (`codespaces.placements`) and pass them
in, so the whole table is unit-tested without a database (codespaces/tests/test_phase.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from codespaces.choices import PLACED_STATES, TRANSITIONS, CodespaceState, DesiredState

S = CodespaceState

# The scheduling workload's states (scheduling.choices.WorkloadState), spelled here so that this module
# stays free of the other app; codespaces/tests/test_phase.py checks they are the same.
WORKLOAD_PENDING = "pending"
WORKLOAD_PLACED = "placed"
WORKLOAD_RUNNING = "running"
WORKLOAD_SUCCEEDED = "succeeded"
WORKLOAD_FAILED = "failed"
WORKLOAD_RELEASED = "released"
WORKLOAD_STATES = (
    WORKLOAD_PENDING,
    WORKLOAD_PLACED,
    WORKLOAD_RUNNING,
    WORKLOAD_SUCCEEDED,
    WORKLOAD_FAILED,
    WORKLOAD_RELEASED,
)
# The workload still holds (or waits for) capacity: a stop or delete of it is under way.
WORKLOAD_HOLDING = frozenset({WORKLOAD_PENDING, WORKLOAD_PLACED, WORKLOAD_RUNNING})

# A codespace that wants to run, by its workload's state (None: no workload yet). A placed workload is
# being started by the backend (materialize), so the codespace is starting; a released or succeeded one
# while the owner still wants it running was reclaimed by the scheduler: stopped, home kept.
RUNNING_PHASE: Mapping[str | None, str] = {
    None: S.QUEUED,
    WORKLOAD_PENDING: S.QUEUED,
    WORKLOAD_PLACED: S.STARTING,
    WORKLOAD_RUNNING: S.RUNNING,
    WORKLOAD_FAILED: S.FAILED,
    WORKLOAD_SUCCEEDED: S.STOPPED,
    WORKLOAD_RELEASED: S.STOPPED,
}


@dataclass(frozen=True, slots=True)
class WorkloadFacts:
    """What the phase reads of the codespace's current scheduling workload."""

    state: str
    pending_reason: str = ""
    pending_code: str = ""
    queue_position: int | None = None
    failure_reason: str = ""


@dataclass(frozen=True, slots=True)
class PlacementFacts:
    """Where the workload's active placement is: node, GPU names ("gpu0, gpu1") and the GPU model."""

    node_name: str
    gpu_names: str = ""
    gpu_model: str = ""


@dataclass(frozen=True, slots=True)
class Observed:
    """A codespace as it is now: its phase, why it waits (only while queued), where it runs (only
    while placed, starting or running) and why it failed (only when failed)."""

    phase: str
    pending_reason: str = ""
    pending_code: str = ""
    queue_position: int | None = None
    failure_reason: str = ""
    node_name: str = ""
    gpu_names: str = ""
    gpu_model_placed: str = ""

    @property
    def location(self) -> str:
        """ "node-3 / gpu1" once placed, else ""."""
        if not self.node_name:
            return ""
        return f"{self.node_name} / {self.gpu_names}" if self.gpu_names else self.node_name


def observed_phase(desired_state: str, workload_state: str | None) -> str:
    """The phase of a codespace that wants `desired_state` and whose current workload is in
    `workload_state` (None: it has none).

    Stopped/deleted while the workload still holds capacity → stopping/deleting (the release is under
    way); otherwise stopped/deleted. Wanted running → `RUNNING_PHASE` of the workload's state.
    """
    if desired_state == DesiredState.DELETED:
        return S.DELETING if workload_state in WORKLOAD_HOLDING else S.DELETED
    if desired_state == DesiredState.STOPPED:
        return S.STOPPING if workload_state in WORKLOAD_HOLDING else S.STOPPED
    return RUNNING_PHASE.get(workload_state, S.QUEUED)


def observe(
    desired_state: str, workload: WorkloadFacts | None, placement: PlacementFacts | None
) -> Observed:
    """The codespace as it is now (see the module docstring): its phase from `observed_phase`, the
    workload's waiting reason, code and position while queued, its failure reason when failed, and the
    placement's node and GPUs while it holds one."""
    phase = observed_phase(desired_state, workload.state if workload is not None else None)
    if workload is None:
        return Observed(phase=phase)
    queued = phase == S.QUEUED
    placed = phase in PLACED_STATES and placement is not None
    # A starting codespace may still wait, placed: for its card's MIG reconfiguration (the only reason
    # a placed workload carries, scheduling.services.mig_reconfig); it is said while starting too.
    waits = queued or phase == S.STARTING
    return Observed(
        phase=phase,
        pending_reason=workload.pending_reason if waits else "",
        pending_code=workload.pending_code if waits else "",
        queue_position=workload.queue_position if queued else None,
        failure_reason=workload.failure_reason if phase == S.FAILED else "",
        node_name=placement.node_name if placed and placement else "",
        gpu_names=placement.gpu_names if placed and placement else "",
        gpu_model_placed=placement.gpu_model if placed and placement else "",
    )


def desired_for(phase: str) -> str:
    """The desired state a move to `phase` records: stopping/stopped → stopped, deleting/deleted →
    deleted, every other phase → running."""
    if phase in (S.STOPPING, S.STOPPED):
        return DesiredState.STOPPED
    if phase in (S.DELETING, S.DELETED):
        return DesiredState.DELETED
    return DesiredState.RUNNING


# The way the timeline walks from one phase to the next when the workload skipped steps between two
# follow-ups (queued → running records placed and starting; running → stopped by a reclaim records
# stopping). Each path is made of legal `TRANSITIONS` (checked in codespaces/tests/test_phase.py).
_VIA: Mapping[tuple[str, str], tuple[str, ...]] = {
    (S.QUEUED, S.STARTING): (S.PLACED,),
    (S.QUEUED, S.RUNNING): (S.PLACED, S.STARTING),
    (S.PLACED, S.RUNNING): (S.STARTING,),
}


def path(from_phase: str, to_phase: str) -> tuple[str, ...]:
    """The phases the timeline records to go from `from_phase` to `to_phase` (the last is
    `to_phase`; empty when they are equal or no legal path exists)."""
    if from_phase == to_phase:
        return ()
    if to_phase in (S.STOPPED, S.DELETED) and from_phase not in (S.STOPPING, S.DELETING):
        via = S.STOPPING if to_phase == S.STOPPED else S.DELETING
        head = path(from_phase, via)
        return (*head, to_phase) if head else ()
    if to_phase in TRANSITIONS.get(from_phase, frozenset()) and (from_phase, to_phase) not in _VIA:
        return (to_phase,)
    via_steps = _VIA.get((from_phase, to_phase))
    if via_steps is not None:
        return (*via_steps, to_phase)
    if S.QUEUED in TRANSITIONS.get(from_phase, frozenset()) and from_phase != S.QUEUED:
        # placed somewhere else between two follow-ups (requeued and placed again): via queued
        rest = path(S.QUEUED, to_phase)
        return (S.QUEUED, *rest) if rest else ()
    return ()
