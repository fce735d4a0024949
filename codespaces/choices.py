"""Enumerations of the codespaces app."""

from __future__ import annotations

from django.db import models


class CodespaceState(models.TextChoices):
    """QUEUED → PLACED → STARTING → RUNNING → STOPPING → STOPPED; FAILED (with a reason); DELETING → DELETED.

    Only `codespaces.lifecycle` changes a codespace's state, and only along `TRANSITIONS`.
    """

    QUEUED = "queued", "Queued"
    PLACED = "placed", "Placed"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    STOPPING = "stopping", "Stopping"
    STOPPED = "stopped", "Stopped"
    FAILED = "failed", "Failed"
    DELETING = "deleting", "Deleting"
    DELETED = "deleted", "Deleted"


S = CodespaceState


class DesiredState(models.TextChoices):
    """What the owner wants of a codespace (stored); its phase (`CodespaceState`) is observed from its
    workload by `codespaces.phase.observe`. Written by the user's actions, the idle policy and a
    reclaim the scheduler made."""

    RUNNING = "running", "Running"
    STOPPED = "stopped", "Stopped"
    DELETED = "deleted", "Deleted"


# The legal transitions: from-state → the states it may move to. Everything else is refused (409).
TRANSITIONS: dict[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.PLACED, S.STARTING, S.RUNNING, S.STOPPING, S.FAILED, S.DELETING}),
    S.PLACED: frozenset({S.STARTING, S.RUNNING, S.QUEUED, S.STOPPING, S.FAILED, S.DELETING}),
    S.STARTING: frozenset({S.RUNNING, S.QUEUED, S.STOPPING, S.FAILED, S.DELETING}),
    S.RUNNING: frozenset({S.QUEUED, S.STOPPING, S.FAILED, S.DELETING}),
    S.STOPPING: frozenset({S.STOPPED, S.FAILED, S.DELETING}),
    S.STOPPED: frozenset({S.QUEUED, S.DELETING}),
    S.FAILED: frozenset({S.QUEUED, S.DELETING}),
    S.DELETING: frozenset({S.DELETED}),
    S.DELETED: frozenset(),
}

# States that hold (or are about to hold) a scheduling workload.
ACTIVE_STATES = (S.QUEUED, S.PLACED, S.STARTING, S.RUNNING)
# States in which the codespace holds a placement on a GPU node.
PLACED_STATES = (S.PLACED, S.STARTING, S.RUNNING)
STARTABLE_STATES = (S.STOPPED, S.FAILED)
STOPPABLE_STATES = (S.QUEUED, S.PLACED, S.STARTING, S.RUNNING)
DELETABLE_STATES = (S.QUEUED, S.PLACED, S.STARTING, S.RUNNING, S.STOPPED, S.FAILED)

STATE_BADGE = {
    S.QUEUED: "warn",
    S.PLACED: "info",
    S.STARTING: "info",
    S.RUNNING: "ok",
    S.STOPPING: "",
    S.STOPPED: "",
    S.FAILED: "danger",
    S.DELETING: "",
    S.DELETED: "",
}


class GpuMode(models.TextChoices):
    """How a codespace uses GPUs: none, one slice of one GPU, or N whole cards."""

    NONE = "none", "CPU only"
    SLICE = "slice", "Slice of one GPU"
    WHOLE = "whole", "Whole cards"
    MIG = "mig", "MIG instance (hard isolation)"


class EventKind(models.TextChoices):
    CREATED = "created", "Created"
    TRANSITION = "transition", "State change"
    PENDING = "pending", "Waiting"
    PLACED = "placed", "Placed"
    IDLE_WARNING = "idle_warning", "Idle warning"
    KEPT = "kept", "Kept alive"
    IDLE_STOPPED = "idle_stopped", "Stopped for idleness"
    RECLAIMED = "reclaimed", "Reclaimed"
    FAILED = "failed", "Failed"
    NOTICE = "notice", "Notice"
