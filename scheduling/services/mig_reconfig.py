"""Dynamic MIG: a card's reconfiguration as a planned step with its own state, applied before its work starts.

The cycle's decide step plans a new layout for an empty dynamic card (`scheduling.services.decide.
MigRelayout`, data); the apply step (`record_relayouts`, in the cycle's transaction) records it as a
`MigReconfiguration` in state PLANNED, links the placements whose instances it creates to it and writes
their waiting reason; those workloads are not materialized. `drive_reconfigurations` (a beat task, one
row at a time, each in its own transaction, so one bad row never stops the others) moves each one:

- PLANNED → APPLYING: the card is checked again (still dynamic, healthy, nothing else on it, the new
  layout valid for its model), the backend is asked to apply it (`Backend.apply_mig_layout`), the
  deadline set (`TESSERA_MIG_RECONFIGURE_TIMEOUT_SECONDS`);
- APPLYING → READY when the backend reports it (`Backend.mig_layout_status`): the card's layout becomes
  the new one (`Gpu.mig_layout`), the waiting workloads are materialized (they start);
- APPLYING → FAILED when the backend reports a failure or the deadline passed: the backend is asked to
  put the old layout back, the card keeps its previous layout in Tessera's record, and the waiting
  workloads go back to the queue with the reason.

Every transition is a compare-and-set on the state (a retried or concurrent drive changes nothing
twice) that appends ``{state, at, reason}`` to `transitions`: the audit trail of the machine, whose
allowed moves are the engine's (`core.placement.mig.RECONFIGURATION_TRANSITIONS`). Asking the backend
again is harmless (`apply_mig_layout` is idempotent), so a crash between two steps only repeats a step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.placement.mig import ReconfigurationState, advance, layout_errors
from scheduling.backends.base import (
    Backend,
    BackendError,
    MigLayout,
    MigLayoutPhase,
    MigLayoutRequest,
)
from scheduling.backends.registry import get_backend
from scheduling.choices import ACTIVE_RECONFIGURATION_STATES, WorkloadState
from scheduling.choices import MigReconfigurationState as State
from scheduling.followups import followups
from scheduling.lock_objects import lock_shards
from scheduling.models import Gpu, MigReconfiguration, Placement, PlacementGpu, Workload
from scheduling.services.decide import MigRelayout, MigSlot
from scheduling.services.mig_cards import layout_pairs, mig_model
from scheduling.services.snapshot import GroupCluster, bump_shards_for_nodes, groups_for_nodes
from scheduling.services.workloads import requeue_workloads, trigger_cycle

logger = logging.getLogger(__name__)

#: The waiting code of a placed workload whose MIG instance a reconfiguration is creating.
WAITING_CODE = "mig_reconfiguring"
#: Most reconfigurations one drive looks at (the rest wait for the next beat).
DRIVE_BATCH = 200
_MAX_REASON = 500


def describe_layout(layout: Iterable[Sequence[Any]]) -> str:
    """``1g.10gb@0, 3g.40gb@4`` (``empty`` for none): how pages and reasons show a layout."""
    text = ", ".join(f"{p}@{s}" for p, s in layout)
    return text or "empty"


def waiting_reason(node: str, gpu_index: int, old: MigLayout, new: MigLayout) -> str:
    """The sentence a waiting workload shows."""
    return (
        f"Waiting for the card's MIG reconfiguration ({node} GPU {gpu_index}: "
        f"{describe_layout(old)} → {describe_layout(new)})"
    )[:_MAX_REASON]


# ------------------------------------------------------------------ apply step of the cycle
def record_relayouts(
    cluster: GroupCluster,
    relayouts: Sequence[MigRelayout],
    slots: Mapping[int, MigSlot],
    *,
    now: datetime,
) -> set[int]:
    """Inside the cycle's transaction: one PLANNED reconfiguration per relayout, the placements on its
    card linked to it, their workloads' waiting reason written. Returns the ids of those workloads
    (the cycle does not materialize them)."""
    waiting: set[int] = set()
    for relayout in relayouts:
        reason = waiting_reason(
            relayout.node, relayout.gpu_index, relayout.old_layout, relayout.new_layout
        )
        reconfiguration = MigReconfiguration.objects.create(
            gpu_id=cluster.gpu_id(relayout.node, relayout.gpu_index),
            old_layout=[list(i) for i in relayout.old_layout],
            new_layout=[list(i) for i in relayout.new_layout],
            transitions=[_transition(State.PLANNED, now, "planned by the scheduling cycle")],
        )
        ids = sorted(
            wid
            for wid, slot in slots.items()
            if (slot.node, slot.gpu_index) == (relayout.node, relayout.gpu_index)
        )
        Placement.objects.filter(workload_id__in=ids, released_at__isnull=True).update(
            mig_reconfiguration=reconfiguration
        )
        Workload.objects.filter(pk__in=ids).update(pending_code=WAITING_CODE, pending_reason=reason)
        waiting.update(ids)
        logger.info("MIG reconfiguration %s planned: %s", reconfiguration.pk, reason)
    return waiting


def placements_waiting_for_reconfiguration(placement_ids: Iterable[int]) -> set[int]:
    """Those of the placements whose instance is created by a reconfiguration that is not ready yet:
    not to start (one query for any number)."""
    return set(
        Placement.objects.filter(
            pk__in=list(placement_ids),
            mig_reconfiguration__state__in=ACTIVE_RECONFIGURATION_STATES,
        ).values_list("pk", flat=True)
    )


# ------------------------------------------------------------------ read model (cluster page)
@dataclass(frozen=True)
class ReconfigurationRow:
    """One reconfiguration as the cluster page shows it."""

    pk: int
    node: str
    gpu_index: int
    old: str
    new: str
    state: str
    since: datetime
    reason: str


def reconfiguration_rows(*, pool: str = "", limit: int = 10) -> list[ReconfigurationRow]:
    """The active reconfigurations and then the latest finished ones (of `pool`'s nodes), at most
    `limit`: the card, old → new layout, the state and since when it is in it."""
    qs = MigReconfiguration.objects.select_related("gpu__node")
    if pool:
        qs = qs.filter(gpu__node__pool=pool)
    active = list(qs.filter(state__in=ACTIVE_RECONFIGURATION_STATES).order_by("pk")[:limit])
    done = list(
        qs.exclude(state__in=ACTIVE_RECONFIGURATION_STATES).order_by("-finished_at", "-pk")[
            : max(0, limit - len(active))
        ]
    )
    return [
        ReconfigurationRow(
            r.pk,
            r.gpu.node.name,
            r.gpu.index,
            describe_layout(_pairs(r.old_layout)),
            describe_layout(_pairs(r.new_layout)),
            r.state,
            r.finished_at or r.applying_at or r.created_at,
            r.reason,
        )
        for r in [*active, *done]
    ]


# ------------------------------------------------------------------ the periodic drive
@dataclass
class DriveReport:
    """What one drive did, by reconfiguration id."""

    applying: list[int] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)


def drive_reconfigurations(
    *, backend: Backend | None = None, now: datetime | None = None
) -> DriveReport:
    """Move every active reconfiguration one step (see the module docstring). A row whose step raises
    is logged and left for the next drive; the others go on."""
    backend = backend or get_backend()
    report = DriveReport()
    ids = list(
        MigReconfiguration.objects.filter(state__in=ACTIVE_RECONFIGURATION_STATES)
        .order_by("pk")
        .values_list("pk", flat=True)[:DRIVE_BATCH]
    )
    for pk in ids:
        try:
            outcome = drive_one(pk, backend=backend, now=now or timezone.now())
        except BackendError as exc:
            logger.warning("MIG reconfiguration %s: backend error, retried: %s", pk, exc.message)
            report.errors.append(pk)
            continue
        except Exception:  # one bad row must not stop the others
            logger.exception("MIG reconfiguration %s: step failed", pk)
            report.errors.append(pk)
            continue
        if outcome is State.APPLYING:
            report.applying.append(pk)
        elif outcome is State.READY:
            report.ready.append(pk)
        elif outcome in (State.FAILED, State.CANCELLED):
            report.failed.append(pk)
    return report


def drive_one(pk: int, *, backend: Backend, now: datetime) -> State | None:
    """One step of one reconfiguration; the state it moved to (None: nothing changed)."""
    row = MigReconfiguration.objects.select_related("gpu__node").filter(pk=pk).first()
    if row is None:
        return None
    if row.state == State.PLANNED:
        problem = _cannot_apply(row)
        if problem:
            return _fail(row, problem, backend=backend, now=now, revert=False)
        request = layout_request(row, requested_at=now)
        if not _move(
            row,
            State.APPLYING,
            now,
            "asked the backend to apply it",
            applying_at=now,
            deadline_at=now
            + timedelta(seconds=int(settings.TESSERA_MIG_RECONFIGURE_TIMEOUT_SECONDS)),
        ):
            return None
        try:
            backend.apply_mig_layout(request)
        except BackendError as exc:
            if exc.permanent:
                row.refresh_from_db()
                return _fail(
                    row, f"the cluster refused it: {exc.message}", backend=backend, now=now
                )
            raise
        return State.APPLYING
    if row.state != State.APPLYING:
        return None
    request = layout_request(row, requested_at=row.applying_at or now)
    if row.deadline_at is not None and now >= row.deadline_at:
        timeout = int(settings.TESSERA_MIG_RECONFIGURE_TIMEOUT_SECONDS)
        return _fail(row, f"timed out: not applied within {timeout} s", backend=backend, now=now)
    backend.apply_mig_layout(request)  # idempotent: a crash after APPLYING asks again
    status = backend.mig_layout_status(request)
    if status.phase is MigLayoutPhase.READY:
        return State.READY if _ready(row, now) else None
    if status.phase is MigLayoutPhase.FAILED:
        return _fail(
            row, status.message or "the cluster reported a failure", backend=backend, now=now
        )
    return None


def layout_request(row: MigReconfiguration, *, requested_at: datetime) -> MigLayoutRequest:
    """The backend's view of a reconfiguration: the card and, for node-level mechanisms, the layouts of
    every dynamic MIG card of its node after the change."""
    gpu = row.gpu
    new = _pairs(row.new_layout)
    node_layouts = []
    for index, layout in (
        Gpu.objects.filter(node_id=gpu.node_id, mig_dynamic=True)
        .order_by("index")
        .values_list("index", "mig_layout")
    ):
        node_layouts.append((index, new if index == gpu.index else _pairs(layout)))
    return MigLayoutRequest(
        reconfiguration_id=row.pk,
        node_name=gpu.node.name,
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        gpu_model=mig_model(gpu.model, gpu.memory_mib) or gpu.model,
        old_layout=_pairs(row.old_layout),
        new_layout=new,
        node_layouts=tuple(node_layouts),
        requested_at=requested_at,
    )


def _pairs(layout: object) -> MigLayout:
    return tuple(sorted(layout_pairs(layout), key=lambda p: p[1]))


def _cannot_apply(row: MigReconfiguration) -> str:
    """Why a planned reconfiguration may not be applied now ("" = it may): the card is no longer a
    healthy dynamic card, its new layout is invalid, or work other than the waiting one holds it."""
    gpu = row.gpu
    if not gpu.mig_dynamic:
        return "the card is no longer set to dynamic MIG"
    if not gpu.healthy:
        return "the card is unhealthy"
    errors = layout_errors(
        mig_model(gpu.model, gpu.memory_mib) or gpu.model, _pairs(row.new_layout)
    )
    if errors:
        return "invalid layout: " + "; ".join(errors)
    others = (
        PlacementGpu.objects.filter(gpu_id=gpu.pk, placement__released_at__isnull=True)
        .exclude(placement__mig_reconfiguration_id=row.pk)
        .count()
    )
    if others:
        return f"the card is not empty: {others} other placement(s) hold it"
    return ""


def _transition(state: str, at: datetime, reason: str) -> dict[str, str]:
    return {"state": str(state), "at": at.isoformat(), "reason": reason[:_MAX_REASON]}


def _move(row: MigReconfiguration, to: State, now: datetime, why: str, **fields: Any) -> bool:
    """Compare-and-set `row` from its current state to `to` (an allowed move of the engine's machine),
    recording the transition; False when another drive moved it first."""
    advance(ReconfigurationState(row.state), ReconfigurationState(to.value))
    transitions = [*(row.transitions or [])[-15:], _transition(to, now, why)]
    done = MigReconfiguration.objects.filter(pk=row.pk, state=row.state).update(
        state=to, transitions=transitions, updated_at=now, **fields
    )
    if done:
        logger.info("MIG reconfiguration %s: %s → %s (%s)", row.pk, row.state, to, why)
        row.state = to
        row.transitions = transitions
        for key, value in fields.items():
            setattr(row, key, value)
    return bool(done)


def _waiting_workloads(row: MigReconfiguration) -> list[int]:
    return sorted(
        Placement.objects.filter(
            mig_reconfiguration_id=row.pk, released_at__isnull=True
        ).values_list("workload_id", flat=True)
    )


def _lock(row: MigReconfiguration, workload_ids: Sequence[int]) -> None:
    """The shards of the card's node and of the waiting workloads, first (docs/adr/0002)."""
    groups = Workload.objects.filter(pk__in=list(workload_ids)).values_list(
        "quota__group_id", flat=True
    )
    lock_shards({*groups_for_nodes([row.gpu.node.labels]), *groups})


def _ready(row: MigReconfiguration, now: datetime) -> bool:
    """APPLYING → READY: the card has its new layout; the waiting workloads start."""
    with transaction.atomic():
        ids = _waiting_workloads(row)
        _lock(row, ids)
        if not _move(row, State.READY, now, "the backend applied it", finished_at=now):
            return False
        Gpu.objects.filter(pk=row.gpu_id).update(mig_layout=row.new_layout)
        placed = list(
            Workload.objects.filter(pk__in=ids, state=WorkloadState.PLACED).values_list(
                "pk", flat=True
            )
        )
        Workload.objects.filter(pk__in=placed, pending_code=WAITING_CODE).update(
            pending_code="", pending_reason=""
        )
        bump_shards_for_nodes([row.gpu.node_id])
        if placed:
            transaction.on_commit(lambda: followups().materialize(placed))
    return True


def _fail(
    row: MigReconfiguration, reason: str, *, backend: Backend, now: datetime, revert: bool = True
) -> State | None:
    """→ FAILED (or CANCELLED from PLANNED, when nothing was asked of the backend): the card keeps its
    previous layout, the backend is asked to put it back, the waiting workloads are requeued."""
    to = State.CANCELLED if row.state == State.PLANNED else State.FAILED
    text = f"MIG reconfiguration of {row.gpu.node.name} GPU {row.gpu.index} failed: {reason}"
    with transaction.atomic():
        ids = _waiting_workloads(row)
        _lock(row, ids)
        if not _move(row, to, now, reason, reason=reason[:_MAX_REASON], finished_at=now):
            return None
        requeue_workloads(
            ids, reason=f"Requeued: {text}"[:_MAX_REASON], code="mig_reconfiguration_failed"
        )
        bump_shards_for_nodes([row.gpu.node_id])
        for group_id in groups_for_nodes([row.gpu.node.labels]):
            trigger_cycle(group_id)
    logger.warning("%s (requeued %s)", text, ids)
    if revert and row.applying_at is not None:
        try:
            backend.apply_mig_layout(layout_request(row, requested_at=now).reverted())
        except BackendError as exc:
            logger.error(
                "MIG reconfiguration %s: could not put the old layout back: %s", row.pk, exc.message
            )
    return to
