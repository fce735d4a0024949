"""GPU health from telemetry: read DCGM health metrics, run the rules, apply what they decide.

read (Prometheus `PrometheusHealth`, or nominal readings on the simulated cluster) → decide
(`health_rules.decide_health`, pure) → apply: each change goes through the operator services
(`scheduling.services.operator.set_gpu_health` / `drain_node`), so it is audited (as the system),
requeues exactly the affected workloads and bumps the shards, just like an operator's click; each
decision is one `GpuHealthEvent` (the history on the node page) and operators are told after the commit
(`portal.notifications`).

What an operator did in between (marked a GPU healthy, or unhealthy) is read back from `Gpu.healthy`
before deciding: an operator's "healthy" resets the rules' streaks and acknowledges the XID showing,
an operator's "unhealthy" is never undone by a rule.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.notifications import notify_operators
from portal.transactions import run_in_transaction
from scheduling.models import Gpu
from scheduling.services.operator import drain_node, set_gpu_health
from scheduling.telemetry.health_rules import (
    Action,
    GpuHealthState,
    GpuReading,
    HealthChange,
    HealthPolicy,
    Rule,
    decide_health,
    operator_removed,
    operator_restored,
)
from scheduling.telemetry.models import GpuHealth, GpuHealthEvent, GpuSample
from scheduling.telemetry.prometheus import PrometheusHealth

logger = logging.getLogger(__name__)

REASON_PREFIX = "Health rule: "
READING_FIELDS = (
    "xid",
    "temperature_c",
    "power_w",
    "ecc_dbe_total",
    "row_remap_failure",
    "uncorrectable_remapped_rows",
)
HISTORY_PER_GPU = 20
MAX_HISTORY_ROWS = 2000


class HealthSource(Protocol):
    def read(self, gpus: Sequence[Gpu]) -> list[GpuReading]:
        """This minute's health reading of each GPU that reported one."""
        ...


class NominalHealth:
    """The simulated cluster: healthy readings (no XID, no ECC error) with temperature and power
    following the GPU's last utilization sample (45 °C + 0.35 °C per %, 80 W + 3 W per %)."""

    def read(self, gpus: Sequence[Gpu]) -> list[GpuReading]:
        latest = GpuSample.objects.order_by("-ts").values_list("ts", flat=True).first()
        last: dict[int, float] = {}
        if latest is not None:
            rows = GpuSample.objects.filter(ts=latest).values_list("gpu_id", "sm_utilization")
            last = dict(rows)
        return [
            GpuReading(
                gpu_id=gpu.pk,
                node=gpu.node.name,
                xid=0,
                temperature_c=round(45 + 0.35 * last.get(gpu.pk, 0.0), 1),
                power_w=round(80 + 3 * last.get(gpu.pk, 0.0), 1),
                ecc_dbe_total=0,
                row_remap_failure=0,
                uncorrectable_remapped_rows=0,
            )
            for gpu in gpus
        ]


def health_source() -> HealthSource:
    """Prometheus (dcgm-exporter) when `TESSERA_PROMETHEUS_URL` is set, else nominal readings."""
    url = getattr(settings, "TESSERA_PROMETHEUS_URL", "")
    return PrometheusHealth(url) if url else NominalHealth()


def health_policy() -> HealthPolicy:
    """The rules' knobs from settings (`TESSERA_HEALTH_*`); out-of-bounds values raise ValueError
    naming the knob (the system check `telemetry.E002` reports it at start-up)."""
    return HealthPolicy(
        fatal_xids=frozenset(int(x) for x in settings.TESSERA_HEALTH_FATAL_XIDS),
        drain_xids=frozenset(int(x) for x in settings.TESSERA_HEALTH_DRAIN_XIDS),
        temperature_max_c=settings.TESSERA_HEALTH_TEMPERATURE_MAX_C,
        temperature_clear_c=settings.TESSERA_HEALTH_TEMPERATURE_CLEAR_C,
        power_max_w=settings.TESSERA_HEALTH_POWER_MAX_W,
        power_clear_w=settings.TESSERA_HEALTH_POWER_CLEAR_W,
        trip_after=settings.TESSERA_HEALTH_TRIP_AFTER,
        clear_after=settings.TESSERA_HEALTH_CLEAR_AFTER,
        max_auto_trips=settings.TESSERA_HEALTH_MAX_AUTO_TRIPS,
        flap_window=timedelta(hours=settings.TESSERA_HEALTH_FLAP_WINDOW_HOURS),
        drain_node_at=settings.TESSERA_HEALTH_DRAIN_NODE_AT,
    )


def state_to_json(state: GpuHealthState) -> dict[str, Any]:
    return {
        "healthy": state.healthy,
        "tripped": state.tripped.value if state.tripped else None,
        "reason": state.reason,
        "over": dict(state.over),
        "under": state.under,
        "trips": [t.isoformat() for t in state.trips],
        "ecc_dbe_seen": state.ecc_dbe_seen,
        "flapping": state.flapping,
        "last_xid": state.last_xid,
        "acknowledged_xid": state.acknowledged_xid,
    }


def state_from_json(raw: dict[str, Any]) -> GpuHealthState:
    if not raw:
        return GpuHealthState()
    return GpuHealthState(
        healthy=bool(raw.get("healthy", True)),
        tripped=Rule(raw["tripped"]) if raw.get("tripped") else None,
        reason=str(raw.get("reason", "")),
        over={str(k): int(v) for k, v in (raw.get("over") or {}).items()},
        under=int(raw.get("under", 0)),
        trips=tuple(datetime.fromisoformat(t) for t in raw.get("trips", [])),
        ecc_dbe_seen=float(raw.get("ecc_dbe_seen", 0.0)),
        flapping=bool(raw.get("flapping", False)),
        last_xid=int(raw.get("last_xid", 0)),
        acknowledged_xid=int(raw.get("acknowledged_xid", 0)),
    )


def _reconciled(state: GpuHealthState, gpu: Gpu) -> GpuHealthState:
    """The rules' state after what an operator did since the last minute (module docstring)."""
    if gpu.healthy and not state.healthy:
        return operator_restored(state)
    if not gpu.healthy and state.healthy:
        return operator_removed(state, "marked unhealthy by an operator")
    return state


@dataclass(frozen=True)
class HealthReport:
    """What one evaluation did."""

    at: datetime
    readings: int
    changes: tuple[HealthChange, ...]
    requeued: tuple[int, ...]


def evaluate_gpu_health(
    now: datetime | None = None,
    source: HealthSource | None = None,
    policy: HealthPolicy | None = None,
) -> HealthReport:
    """Read, decide and apply one minute of GPU health (module docstring)."""
    now = now or timezone.now()
    source = source or health_source()
    policy = policy or health_policy()
    gpus = list(Gpu.objects.select_related("node").order_by("pk"))
    by_id = {gpu.pk: gpu for gpu in gpus}
    readings = source.read(gpus)
    stored = {h.gpu_id: h for h in GpuHealth.objects.filter(gpu_id__in=list(by_id))}
    states = {
        gpu_id: _reconciled(state_from_json(stored[gpu_id].state if gpu_id in stored else {}), gpu)
        for gpu_id, gpu in by_id.items()
    }
    plan = decide_health(readings, states, policy, now)
    requeued: list[int] = []
    for change in plan.changes:
        requeued.extend(_apply(change, by_id[change.gpu_id], now))

    def save_states() -> None:
        read = {r.gpu_id: r for r in readings}
        rows = []
        for gpu_id, state in plan.states.items():
            reading = read.get(gpu_id)
            old = stored.get(gpu_id)
            row = GpuHealth(gpu_id=gpu_id, state=state_to_json(state))
            for name in READING_FIELDS:
                value = getattr(reading, name) if reading is not None else getattr(old, name, None)
                setattr(row, name, value)
            row.read_at = now if reading is not None else getattr(old, "read_at", None)
            rows.append(row)
        # one upsert for every GPU (thousands on a large cluster), not a round trip each
        GpuHealth.objects.bulk_create(
            rows,
            batch_size=1000,
            update_conflicts=True,
            unique_fields=["gpu"],
            update_fields=["state", "read_at", *READING_FIELDS],
        )

    run_in_transaction(save_states, name="gpu health states")
    return HealthReport(
        at=now, readings=len(readings), changes=plan.changes, requeued=tuple(sorted(requeued))
    )


def _apply(change: HealthChange, gpu: Gpu, now: datetime) -> list[int]:
    """Apply one change through the operator services, record its event, tell operators after the
    commit. Returns the workloads it requeued."""
    reason = f"{REASON_PREFIX}{change.reason}"[:500]

    def run() -> list[int]:
        ids: list[int] = []
        if change.action in (Action.MARK_UNHEALTHY, Action.DRAIN_NODE) and gpu.healthy:
            if change.rule is not Rule.NODE_GPUS:
                ids += set_gpu_health(gpu.pk, healthy=False, reason=reason, actor=None)
        if change.action is Action.DRAIN_NODE:
            ids += drain_node(gpu.node_id, reason=reason, actor=None)
        elif change.action is Action.MARK_HEALTHY:
            ids += set_gpu_health(gpu.pk, healthy=True, reason=reason, actor=None)
        GpuHealthEvent.objects.create(
            ts=now,
            gpu=gpu,
            action=change.action.value,
            rule=change.rule.value,
            reason=change.reason[:500],
            value=change.value,
            requeued=sorted(set(ids)),
        )
        transaction.on_commit(lambda: _tell_operators(change, gpu, sorted(set(ids))))
        return ids

    ids = run_in_transaction(run, name="gpu health change")
    if change.action is Action.MARK_HEALTHY:
        gpu.healthy = True
    elif change.action is not Action.HOLD and change.rule is not Rule.NODE_GPUS:
        gpu.healthy = False
    logger.warning("gpu health: %s %s on %s: %s", change.action, gpu, gpu.node.name, change.reason)
    return ids


def _tell_operators(change: HealthChange, gpu: Gpu, requeued: list[int]) -> None:
    what = {
        Action.MARK_UNHEALTHY: "marked unhealthy",
        Action.MARK_HEALTHY: "recovered",
        Action.DRAIN_NODE: "node drained",
        Action.HOLD: "held out (flapping)",
    }[change.action]
    subject = f"[tessera] GPU {gpu.index} of {gpu.node.name} {what}: {change.reason}"
    body = (
        f"GPU {gpu.index} ({gpu.uuid}) of node {gpu.node.name}: {what}.\n"
        f"Rule: {change.rule.value}. {change.reason}\n"
        f"Requeued workloads: {', '.join(map(str, requeued)) or 'none'}.\n"
    )
    notify_operators(
        subject,
        body,
        {
            "gpu": gpu.uuid,
            "node": gpu.node.name,
            "action": change.action.value,
            "rule": change.rule.value,
            "reason": change.reason,
            "value": change.value,
            "requeued": requeued,
        },
    )


def health_history(
    gpu_ids: Sequence[int], *, limit: int = HISTORY_PER_GPU
) -> dict[int, list[GpuHealthEvent]]:
    """The latest health events of each GPU, newest first (the node page)."""
    out: dict[int, list[GpuHealthEvent]] = {gpu_id: [] for gpu_id in gpu_ids}
    events = GpuHealthEvent.objects.filter(gpu_id__in=list(gpu_ids)).order_by("-ts", "-id")
    for event in events[:MAX_HISTORY_ROWS]:
        if len(out[event.gpu_id]) < limit:
            out[event.gpu_id].append(event)
    return out


@dataclass(frozen=True)
class GpuHealthView:
    """One GPU on the node page: its last DCGM health reading, why the rules hold it out (if they do)
    and its latest health events."""

    gpu: Gpu
    reading: GpuHealth | None
    reason: str
    flapping: bool
    events: list[GpuHealthEvent]


def node_health(node_id: int) -> list[GpuHealthView]:
    """The health of every GPU of a node, by GPU index."""
    gpus = list(Gpu.objects.filter(node_id=node_id).order_by("index"))
    readings = {h.gpu_id: h for h in GpuHealth.objects.filter(gpu__in=gpus)}
    history = health_history([g.pk for g in gpus])
    out = []
    for gpu in gpus:
        reading = readings.get(gpu.pk)
        state = state_from_json(reading.state) if reading is not None else GpuHealthState()
        out.append(
            GpuHealthView(
                gpu=gpu,
                reading=reading,
                reason="" if gpu.healthy else state.reason,
                flapping=state.flapping,
                events=history[gpu.pk],
            )
        )
    return out
