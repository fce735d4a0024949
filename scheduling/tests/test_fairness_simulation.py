"""A month of synthetic demand from three teams in compressed time (one step = one hour), through the
cycle's real decide step (admission with the quota tree, the numpy engine, reclaim off: every job runs
one hour), printing each team's GPU-hours against its fair share: without decay, with a one-week
half-life, and with a weekly GPU-hour budget on the heaviest team. The figures are in docs/quotas.md
("Fairness over time: a month in numbers"); `pytest -s` prints the table.

Demand (seeded, deterministic), 24 GPUs (3 nodes of 8), every team min 8, max 24, weight 1:
- team-a: a steady heavy user, 18-22 GPUs every hour of the month;
- team-b: office hours, 14-18 GPUs on weekdays 08-18 UTC, 2 otherwise;
- team-c: light, 4-6 GPUs, and 20 GPUs the whole third week (a deadline).
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from core.placement import ClusterState, PlacementRequest, ReservationPolicy
from core.placement.tests.builders import node
from quotas.fairness import BudgetState, UsageHour, decayed_usage, fair_shares
from quotas.resources import Resources
from quotas.usage import GroupCapacity, QuotaSpec, build_snapshot
from scheduling.services.decide import CycleInput, PendingWorkload, decide
from scheduling.tests.test_decide import BIG, CARD_MIB, quota, usage

START = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday
HOURS = 30 * 24
TEAMS = ("team-a", "team-b", "team-c")
NODES = [node(f"n{i}", 8) for i in range(3)]


def demand(team: str, hour: int, rng: random.Random) -> int:
    moment = START + timedelta(hours=hour)
    if team == "team-a":
        return rng.randint(18, 22)
    if team == "team-b":
        office = moment.weekday() < 5 and 8 <= moment.hour < 18
        return rng.randint(14, 18) if office else 2
    return 20 if 14 * 24 <= hour < 21 * 24 else rng.randint(4, 6)


def specs() -> list[QuotaSpec]:
    return [quota(i + 1, team, gpu_min=8, gpu_max=24) for i, team in enumerate(TEAMS)]


def one_hour(specs_now: list[QuotaSpec], wanted: dict[int, int], hour: int) -> dict[int, int]:
    """The cycle's decision for one hour: every job is 1 GPU for 1 hour; returns GPUs placed per quota."""
    waiting, wid = [], 0
    for quota_id, count in sorted(wanted.items()):
        for _ in range(count):
            wid += 1
            u = usage(wid, quota_id, gpus=1)
            waiting.append(
                PendingWorkload(
                    usage=u,
                    request=PlacementRequest(str(wid), 1000, 1024, 1, 1000, 0),
                    submitted_at=START + timedelta(hours=hour, seconds=wid),
                )
            )
    snapshot = build_snapshot(
        group_id=1, group_name="pool", allow_overcommitted_min=False,
        capacity=GroupCapacity(
            gpu=Resources(24 * 1000, 24 * CARD_MIB, sum(n.cpu_milli for n in NODES), BIG),
            cpu=Resources(0, 0, 0, BIG),
        ),
        specs=specs_now, workloads=[p.usage for p in waiting], headroom=False,
    )  # fmt: skip
    cycle = CycleInput(
        pending=tuple(waiting),
        quota=snapshot,
        cluster=ClusterState.from_nodes(NODES, ReservationPolicy()),
    )
    placed: dict[int, int] = dict.fromkeys(wanted, 0)
    by_id = {p.workload_id: p.usage.quota_id for p in waiting}
    for a in decide(cycle).placements:
        placed[by_id[int(a.request_id)]] += 1
    return placed


def simulate(*, half_life: int | None, budget_a: float | None) -> dict[str, float]:
    """GPU-hours per team over the month."""
    rng = random.Random(17)
    history: list[UsageHour] = []
    totals = dict.fromkeys(TEAMS, 0.0)
    base = specs()
    weights = {s.quota_id: 1 for s in base}
    for hour in range(HOURS):
        now = START + timedelta(hours=hour)
        specs_now = list(base)
        if half_life:
            usage_now = decayed_usage(history, now=now, half_life_hours=half_life)
            shares = fair_shares(weights, usage_now, half_life_hours=half_life)
            specs_now = [replace(s, fair_share=shares[s.quota_id]) for s in specs_now]
        if budget_a is not None:
            week_start = now - timedelta(days=now.weekday(), hours=now.hour)
            used = sum(h.gpu_hours for h in history if h.quota_id == 1 and h.hour >= week_start)
            state = BudgetState(1, "this week", used, budget_a, hard=False)
            specs_now[0] = replace(specs_now[0], budget=state)
        wanted = {s.quota_id: demand(s.name, hour, rng) for s in base}
        placed = one_hour(specs_now, wanted, hour)
        for spec in base:
            gpus = placed[spec.quota_id]
            totals[spec.name] += gpus
            if gpus:
                history.append(UsageHour(spec.quota_id, now, float(gpus)))
    return totals


def table(title: str, totals: dict[str, float]) -> list[str]:
    delivered = sum(totals.values())
    share = delivered / len(totals)
    lines = [title, f"  {'team':8} {'GPU-hours':>10} {'fair share':>10} {'of share':>9}"]
    for team, hours in totals.items():
        lines.append(f"  {team:8} {hours:10.0f} {share:10.0f} {hours / share:9.0%}")
    return lines


def test_a_month_of_three_teams_with_and_without_decay_and_with_a_budget() -> None:
    plain = simulate(half_life=None, budget_a=None)
    decayed = simulate(half_life=168, budget_a=None)
    budgeted = simulate(half_life=None, budget_a=2200.0)
    print()  # noqa: T201 - the table of the month (pytest -s)
    for line in (
        *table("no decay (borrowing by weight only)", plain),
        *table("decayed fair share, half-life 168 h", decayed),
        *table("team-a weekly budget 2200 GPU-hours (no decay)", budgeted),
    ):
        print(line)  # noqa: T201
    # decay moves borrowed GPU-hours from the steady heavy user to the two that used less recently;
    # the budget stops team-a's borrowing once a week's 2200 GPU-hours are used (the GPUs only it
    # wanted then stay idle: 417 GPU-hours over the month)
    assert plain == {"team-a": 9776.0, "team-b": 2978.0, "team-c": 4460.0}
    assert decayed == {"team-a": 9345.0, "team-b": 3262.0, "team-c": 4673.0}
    assert budgeted == {"team-a": 9359.0, "team-b": 2978.0, "team-c": 4460.0}
