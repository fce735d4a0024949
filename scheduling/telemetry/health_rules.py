"""GPU health rules: one minute of DCGM readings in, what to do about each GPU out (pure, no Django).

A reading holds what dcgm-exporter reports for one GPU: `DCGM_FI_DEV_XID_ERRORS` (the last XID),
`DCGM_FI_DEV_GPU_TEMP` (°C), `DCGM_FI_DEV_POWER_USAGE` (W), `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`
(double-bit volatile ECC errors since the driver loaded), `DCGM_FI_DEV_ROW_REMAP_FAILURE` (1 when a row
could not be remapped) and `DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`.

Two kinds of rule:

* **latched faults** (a fatal XID such as 79 "GPU has fallen off the bus", a new double-bit ECC
  error, a row remap failure): one reading trips the rule; the GPU stays unhealthy until an operator
  marks it healthy again (after a reset or a replacement);
* **thresholds** (temperature, power) with hysteresis and a hold-down: the GPU trips after
  `trip_after` consecutive readings above the limit, and recovers by itself only after
  `clear_after` consecutive readings below the (lower) clear level. A GPU that tripped
  `max_auto_trips` times within `flap_window` stops recovering by itself (it is flapping): an
  operator decides.

A node whose unhealthy GPUs reach `drain_node_at` (or that shows an XID of `drain_xids`) is drained.

`decide_health` is a pure function of the readings, the previous state of each GPU, and the policy:
the service (`scheduling.telemetry.health`) loads and stores the state and applies the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

# XIDs that mean the GPU cannot be trusted until it is reset (NVIDIA's XID catalogue):
# 48 double-bit ECC, 62 internal micro-controller halt, 64 ECC page retirement / row remap failure,
# 74 NVLink error, 79 fallen off the bus, 94/95 contained / uncontained ECC error.
DEFAULT_FATAL_XIDS = frozenset({48, 62, 64, 74, 79, 94, 95})
XID_MEANINGS = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    94: "contained ECC error",
    95: "uncontained ECC error",
}
# The bounds a configured policy must stay within (settings are checked against them).
MAX_TEMPERATURE_C = 150.0
MAX_POWER_W = 5000.0
MAX_STREAK = 1440
MAX_XID = 1000


class Rule(StrEnum):
    XID = "xid"
    ECC_DBE = "ecc_dbe"
    ROW_REMAP = "row_remap"
    TEMPERATURE = "temperature"
    POWER = "power"
    NODE_GPUS = "node_gpus"


LATCHED = frozenset({Rule.XID, Rule.ECC_DBE, Rule.ROW_REMAP})
THRESHOLDS = (Rule.TEMPERATURE, Rule.POWER)


class Action(StrEnum):
    MARK_UNHEALTHY = "mark_unhealthy"
    MARK_HEALTHY = "mark_healthy"
    DRAIN_NODE = "drain_node"
    HOLD = "hold"  # a threshold recovered but the GPU flaps: it stays out, an operator decides


@dataclass(frozen=True, slots=True)
class GpuReading:
    """What dcgm-exporter reported for one GPU this minute (None: the metric was not exported)."""

    gpu_id: int
    node: str
    xid: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_dbe_total: float | None = None
    row_remap_failure: float | None = None
    uncorrectable_remapped_rows: float | None = None


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """The rules' knobs (from settings: `TESSERA_HEALTH_*`, see portal/settings.py)."""

    fatal_xids: frozenset[int] = DEFAULT_FATAL_XIDS
    drain_xids: frozenset[int] = frozenset()
    temperature_max_c: float = 90.0
    temperature_clear_c: float = 80.0
    power_max_w: float = 750.0
    power_clear_w: float = 650.0
    trip_after: int = 3
    clear_after: int = 10
    max_auto_trips: int = 3
    flap_window: timedelta = timedelta(hours=24)
    drain_node_at: int = 0  # unhealthy GPUs on one node that drain it; 0 = never

    def __post_init__(self) -> None:
        if not 0 < self.temperature_clear_c <= self.temperature_max_c <= MAX_TEMPERATURE_C:
            raise ValueError("temperature: need 0 < clear <= max <= 150 °C")
        if not 0 < self.power_clear_w <= self.power_max_w <= MAX_POWER_W:
            raise ValueError("power: need 0 < clear <= max <= 5000 W")
        if not (1 <= self.trip_after <= MAX_STREAK and 1 <= self.clear_after <= MAX_STREAK):
            raise ValueError(f"trip_after and clear_after: between 1 and {MAX_STREAK} readings")
        if not 1 <= self.max_auto_trips <= 100:
            raise ValueError("max_auto_trips: between 1 and 100")
        if any(not 0 < x <= MAX_XID for x in self.fatal_xids | self.drain_xids):
            raise ValueError(f"XIDs: between 1 and {MAX_XID}")
        if not 0 <= self.drain_node_at <= 64:
            raise ValueError("drain_node_at: between 0 (never) and 64 GPUs")


@dataclass(frozen=True, slots=True)
class GpuHealthState:
    """What the rules remember about one GPU between minutes.

    `over`: consecutive readings above each threshold; `under`: consecutive readings since the
    tripped threshold went below its clear level; `tripped`: the rule that took the GPU out (None
    while healthy, or when an operator took it out); `trips`: when the rules took it out recently
    (for flap detection); `ecc_dbe_seen`: the last double-bit ECC count (a counter: only a rise trips)."""

    healthy: bool = True
    tripped: Rule | None = None
    reason: str = ""
    over: Mapping[str, int] = field(default_factory=dict)
    under: int = 0
    trips: tuple[datetime, ...] = ()
    ecc_dbe_seen: float = 0.0
    flapping: bool = False
    last_xid: int = 0
    acknowledged_xid: int = 0


def operator_restored(state: GpuHealthState) -> GpuHealthState:
    """The state after an operator marked the GPU healthy: the rules start again from clean
    streaks, and the XID that was showing is acknowledged (dcgm-exporter keeps reporting the last
    XID until the driver reloads; only a different XID trips the GPU again)."""
    return replace(
        state,
        healthy=True,
        tripped=None,
        reason="",
        over={},
        under=0,
        flapping=False,
        acknowledged_xid=state.last_xid,
    )


def operator_removed(state: GpuHealthState, reason: str) -> GpuHealthState:
    """The state after an operator took the GPU out: no rule puts it back."""
    return replace(state, healthy=False, tripped=None, reason=reason, over={}, under=0)


@dataclass(frozen=True, slots=True)
class HealthChange:
    """One thing to do: take a GPU out, put it back, drain its node, or hold it out (flapping)."""

    gpu_id: int
    node: str
    action: Action
    rule: Rule
    reason: str
    value: float | None = None


@dataclass(frozen=True, slots=True)
class HealthPlan:
    changes: tuple[HealthChange, ...]
    states: Mapping[int, GpuHealthState]


def _latched(
    reading: GpuReading, state: GpuHealthState, policy: HealthPolicy
) -> HealthChange | None:
    """The first latched fault of this reading, if any (XID, then ECC, then row remap)."""
    xid = int(reading.xid) if reading.xid is not None else 0
    if xid in policy.fatal_xids | policy.drain_xids and xid != state.acknowledged_xid:
        meaning = XID_MEANINGS.get(xid, "fatal XID")
        action = Action.DRAIN_NODE if xid in policy.drain_xids else Action.MARK_UNHEALTHY
        return HealthChange(
            reading.gpu_id,
            reading.node,
            action,
            Rule.XID,
            f"XID {xid}: {meaning} (DCGM_FI_DEV_XID_ERRORS)",
            float(xid),
        )
    if reading.ecc_dbe_total is not None and reading.ecc_dbe_total > state.ecc_dbe_seen:
        return HealthChange(
            reading.gpu_id,
            reading.node,
            Action.MARK_UNHEALTHY,
            Rule.ECC_DBE,
            f"{reading.ecc_dbe_total:g} double-bit ECC errors (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)",
            reading.ecc_dbe_total,
        )
    if reading.row_remap_failure is not None and reading.row_remap_failure >= 1:
        return HealthChange(
            reading.gpu_id,
            reading.node,
            Action.MARK_UNHEALTHY,
            Rule.ROW_REMAP,
            "row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE)",
            reading.row_remap_failure,
        )
    return None


def _threshold_value(reading: GpuReading, rule: Rule) -> float | None:
    return reading.temperature_c if rule is Rule.TEMPERATURE else reading.power_w


def _limits(rule: Rule, policy: HealthPolicy) -> tuple[float, float, str]:
    if rule is Rule.TEMPERATURE:
        return policy.temperature_max_c, policy.temperature_clear_c, "°C"
    return policy.power_max_w, policy.power_clear_w, "W"


def _metric(rule: Rule) -> str:
    return "DCGM_FI_DEV_GPU_TEMP" if rule is Rule.TEMPERATURE else "DCGM_FI_DEV_POWER_USAGE"


def _decide_one(
    reading: GpuReading, state: GpuHealthState, policy: HealthPolicy, now: datetime
) -> tuple[GpuHealthState, list[HealthChange]]:
    """The new state of one GPU and what to do about it (module docstring)."""
    trips = tuple(t for t in state.trips if now - t < policy.flap_window)
    state = replace(state, trips=trips)
    if reading.ecc_dbe_total is not None and reading.ecc_dbe_total < state.ecc_dbe_seen:
        state = replace(state, ecc_dbe_seen=reading.ecc_dbe_total)  # the counter reset
    if reading.xid is not None:
        xid = int(reading.xid)
        acknowledged = state.acknowledged_xid if xid == state.acknowledged_xid else 0
        state = replace(state, last_xid=xid, acknowledged_xid=acknowledged)
    latched = _latched(reading, state, policy)
    if reading.ecc_dbe_total is not None:
        state = replace(state, ecc_dbe_seen=max(state.ecc_dbe_seen, reading.ecc_dbe_total))
    if latched is not None and (state.healthy or state.tripped not in LATCHED):
        new = replace(
            state, healthy=False, tripped=latched.rule, reason=latched.reason, under=0, over={}
        )
        return new, [latched]
    if not state.healthy and state.tripped is None:
        return state, []  # taken out by an operator: only an operator puts it back

    over = dict(state.over)
    for rule in THRESHOLDS:
        value = _threshold_value(reading, rule)
        limit, _clear, _unit = _limits(rule, policy)
        over[rule.value] = over.get(rule.value, 0) + 1 if value is not None and value > limit else 0
    state = replace(state, over=over)

    if state.healthy:
        for rule in THRESHOLDS:
            if over[rule.value] >= policy.trip_after:
                value = _threshold_value(reading, rule)
                limit, _clear, unit = _limits(rule, policy)
                reason = (
                    f"{rule.value} {value:g} {unit} above {limit:g} {unit} for "
                    f"{over[rule.value]} readings ({_metric(rule)})"
                )
                new = replace(
                    state,
                    healthy=False,
                    tripped=rule,
                    reason=reason,
                    under=0,
                    trips=(*trips, now),
                )
                return new, [
                    HealthChange(
                        reading.gpu_id, reading.node, Action.MARK_UNHEALTHY, rule, reason, value
                    )
                ]
        return state, []

    if state.tripped in LATCHED or state.tripped is None or state.flapping:
        return state, []
    rule = state.tripped
    value = _threshold_value(reading, rule)
    _limit, clear, unit = _limits(rule, policy)
    under = state.under + 1 if value is not None and value < clear else 0
    state = replace(state, under=under)
    if under < policy.clear_after:
        return state, []
    if len(trips) >= policy.max_auto_trips:
        reason = (
            f"{rule.value} back below {clear:g} {unit}, but the GPU tripped {len(trips)} times "
            f"in {policy.flap_window}: it stays out until an operator marks it healthy"
        )
        held = replace(state, flapping=True, reason=reason)
        return held, [HealthChange(reading.gpu_id, reading.node, Action.HOLD, rule, reason, value)]
    reason = f"{rule.value} below {clear:g} {unit} for {under} readings ({_metric(rule)})"
    recovered = replace(state, healthy=True, tripped=None, reason="", under=0, over={})
    return recovered, [
        HealthChange(reading.gpu_id, reading.node, Action.MARK_HEALTHY, rule, reason, value)
    ]


def decide_health(
    readings: Sequence[GpuReading],
    states: Mapping[int, GpuHealthState],
    policy: HealthPolicy,
    now: datetime,
) -> HealthPlan:
    """What to do about each GPU this minute (module docstring). GPUs without a reading keep their
    state (a missing scrape never trips nor clears a GPU). Changes are ordered by node then GPU id;
    a node whose unhealthy GPUs reach `policy.drain_node_at` gets one DRAIN_NODE change."""
    new_states = dict(states)
    changes: list[HealthChange] = []
    for reading in sorted(readings, key=lambda r: (r.node, r.gpu_id)):
        state, found = _decide_one(
            reading, states.get(reading.gpu_id, GpuHealthState()), policy, now
        )
        new_states[reading.gpu_id] = state
        changes.extend(found)
    if policy.drain_node_at:
        nodes = {r.gpu_id: r.node for r in readings}
        unhealthy: dict[str, list[int]] = {}
        for gpu_id, state in sorted(new_states.items()):
            if not state.healthy and gpu_id in nodes:
                unhealthy.setdefault(nodes[gpu_id], []).append(gpu_id)
        newly = {c.node for c in changes if c.action is Action.MARK_UNHEALTHY}
        draining = {c.node for c in changes if c.action is Action.DRAIN_NODE}
        for node in sorted(newly - draining):
            if len(unhealthy.get(node, [])) >= policy.drain_node_at:
                gpu_ids = unhealthy[node]
                changes.append(
                    HealthChange(
                        gpu_ids[0],
                        node,
                        Action.DRAIN_NODE,
                        Rule.NODE_GPUS,
                        f"{len(gpu_ids)} unhealthy GPUs on {node} "
                        f"(drain at {policy.drain_node_at})",
                        float(len(gpu_ids)),
                    )
                )
    return HealthPlan(changes=tuple(changes), states=new_states)
