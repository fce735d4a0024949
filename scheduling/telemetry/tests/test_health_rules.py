"""The GPU health rules on fixed readings (pure: no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.telemetry.health_rules import (
    Action,
    GpuHealthState,
    GpuReading,
    HealthPolicy,
    Rule,
    decide_health,
    operator_restored,
)

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
POLICY = HealthPolicy(trip_after=3, clear_after=2, max_auto_trips=2)


def reading(gpu_id: int = 1, node: str = "n1", **values: float) -> GpuReading:
    defaults: dict[str, float] = {"temperature_c": 60.0, "power_w": 300.0}
    defaults.update(values)
    xid = int(defaults.pop("xid", 0))
    return GpuReading(gpu_id=gpu_id, node=node, xid=xid, **defaults)


def run(series: list[GpuReading], policy: HealthPolicy = POLICY, state=None):
    """Feed one reading per minute to the rules; return (actions per minute, last state)."""
    states = {1: state or GpuHealthState()}
    actions = []
    for minute, r in enumerate(series):
        plan = decide_health([r], states, policy, T0 + timedelta(minutes=minute))
        states = dict(plan.states)
        actions.append([(c.action, c.rule) for c in plan.changes])
    return actions, states[1]


def test_xid_79_marks_the_gpu_unhealthy_at_once_with_the_reason():
    plan = decide_health([reading(xid=79)], {}, POLICY, T0)

    (change,) = plan.changes
    assert (change.action, change.rule, change.value) == (Action.MARK_UNHEALTHY, Rule.XID, 79.0)
    assert change.reason == "XID 79: GPU has fallen off the bus (DCGM_FI_DEV_XID_ERRORS)"
    assert plan.states[1].healthy is False
    assert plan.states[1].tripped is Rule.XID


def test_a_harmless_xid_does_nothing():
    # XID 13 (graphics engine exception) is the application's fault, not the GPU's
    plan = decide_health([reading(xid=13)], {}, POLICY, T0)
    assert plan.changes == ()
    assert plan.states[1].healthy is True


def test_a_latched_fault_never_recovers_by_itself():
    actions, state = run([reading(xid=79)] + [reading(xid=0)] * 5)
    assert actions == [[(Action.MARK_UNHEALTHY, Rule.XID)]] + [[]] * 5
    assert state.healthy is False


def test_the_xid_an_operator_acknowledged_does_not_trip_again_but_a_new_one_does():
    _actions, tripped = run([reading(xid=79)])
    restored = operator_restored(tripped)
    actions, state = run([reading(xid=79), reading(xid=79), reading(xid=48)], state=restored)
    assert actions == [[], [], [(Action.MARK_UNHEALTHY, Rule.XID)]]
    assert state.reason == "XID 48: double-bit ECC error (DCGM_FI_DEV_XID_ERRORS)"


def test_double_bit_ecc_trips_on_a_rise_of_the_counter_only():
    actions, state = run(
        [reading(ecc_dbe_total=0), reading(ecc_dbe_total=2)],
    )
    assert actions == [[], [(Action.MARK_UNHEALTHY, Rule.ECC_DBE)]]
    assert state.reason == "2 double-bit ECC errors (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)"
    # an operator resets the GPU; the same count read again is not a new error
    actions, _ = run([reading(ecc_dbe_total=2)] * 3, state=operator_restored(state))
    assert actions == [[], [], []]


def test_row_remap_failure_marks_the_gpu_unhealthy():
    actions, state = run([reading(row_remap_failure=1)])
    assert actions == [[(Action.MARK_UNHEALTHY, Rule.ROW_REMAP)]]
    assert state.reason == "row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE)"


def test_temperature_trips_after_three_readings_and_recovers_below_the_clear_level():
    temps = [91, 92, 93, 85, 79, 78]
    actions, state = run([reading(temperature_c=t) for t in temps])
    assert actions == [
        [],
        [],
        [(Action.MARK_UNHEALTHY, Rule.TEMPERATURE)],
        [],  # 85 °C is below the limit but above the clear level (hysteresis)
        [],
        [(Action.MARK_HEALTHY, Rule.TEMPERATURE)],
    ]
    assert state.healthy is True
    assert len(state.trips) == 1


def test_a_flapping_temperature_does_not_flap_the_gpu():
    # 91 / 89 °C alternating: never three readings in a row above 90 → nothing happens
    actions, state = run([reading(temperature_c=91 if i % 2 == 0 else 89) for i in range(20)])
    assert actions == [[]] * 20
    assert state.healthy is True


def test_a_gpu_that_trips_again_and_again_is_held_out_for_an_operator():
    hot, cool = reading(temperature_c=95), reading(temperature_c=70)
    cycle = [hot, hot, hot, cool, cool]
    actions, state = run(cycle * 3)
    flat = [a for minute in actions for a in minute]
    assert flat == [
        (Action.MARK_UNHEALTHY, Rule.TEMPERATURE),
        (Action.MARK_HEALTHY, Rule.TEMPERATURE),
        (Action.MARK_UNHEALTHY, Rule.TEMPERATURE),
        (Action.HOLD, Rule.TEMPERATURE),
    ]
    assert state.healthy is False
    assert state.flapping is True


def test_missing_readings_keep_the_state():
    plan = decide_health([], {1: GpuHealthState(healthy=False, tripped=Rule.XID)}, POLICY, T0)
    assert plan.changes == ()
    assert plan.states[1].tripped is Rule.XID


def test_a_drain_xid_drains_the_node():
    policy = HealthPolicy(drain_xids=frozenset({79}))
    (change,) = decide_health([reading(xid=79)], {}, policy, T0).changes
    assert (change.action, change.rule) == (Action.DRAIN_NODE, Rule.XID)


def test_enough_unhealthy_gpus_drain_their_node_once():
    policy = HealthPolicy(drain_node_at=2)
    readings = [reading(1, "n1", xid=79), reading(2, "n1", xid=48), reading(3, "n2", xid=79)]
    changes = decide_health(readings, {}, policy, T0).changes
    assert [(c.gpu_id, c.node, c.action, c.rule) for c in changes] == [
        (1, "n1", Action.MARK_UNHEALTHY, Rule.XID),
        (2, "n1", Action.MARK_UNHEALTHY, Rule.XID),
        (3, "n2", Action.MARK_UNHEALTHY, Rule.XID),
        (1, "n1", Action.DRAIN_NODE, Rule.NODE_GPUS),
    ]
    assert changes[-1].reason == "2 unhealthy GPUs on n1 (drain at 2)"


@pytest.mark.parametrize(
    "knobs",
    [
        {"temperature_max_c": 70.0, "temperature_clear_c": 80.0},
        {"power_max_w": 9000.0},
        {"trip_after": 0},
        {"fatal_xids": frozenset({0})},
        {"drain_node_at": 100},
    ],
)
def test_a_policy_out_of_bounds_is_refused(knobs):
    with pytest.raises(ValueError):
        HealthPolicy(**knobs)
