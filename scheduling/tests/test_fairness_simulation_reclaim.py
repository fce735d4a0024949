"""The month of `test_fairness_simulation` with jobs that outlive an hour, so that borrowed work is
reclaimed: immediate reclaim against polite reclaim (a one-hour notice: in compressed time one step),
and team-b's borrowing shared equally among its three people. Every step runs the cycle's real decide
step (admission, the engine, the reclaim claim) and the real notice plan (`plan_notices`) until nothing
changes, as consecutive cycles do; `pytest -s` prints the table that is in docs/quotas.md.

Same pool and demand as the month without reclaim (24 GPUs, min 8 / max 24 / weight 1 each; team-a
steady 18-22 GPUs, team-b office hours 14-18, team-c 4-6 and 20 in week 3), but every job is one GPU for
3-6 hours. A team tops its running and waiting jobs up to its demand every hour and withdraws waiting
ones above it. team-b's jobs belong to three people, b1 submitting 70 % of them.

Work lost: a job stopped at once restarts from scratch (the hours it ran are lost); a job given notice
checkpoints (the hook) and later resumes where it stopped (nothing lost, it keeps running until the
deadline)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest

from core.placement import Assignment
from quotas.fairness import EqualShare
from quotas.reclaim_notices import LiveNotice, plan_notices
from quotas.usage import QuotaSpec
from scheduling.services.decide import CycleDecision, decide
from scheduling.tests.test_decide import cycle_input, pending, usage
from scheduling.tests.test_fairness_simulation import HOURS, NODES, START, TEAMS, demand, specs

NOTICE_SECONDS = 3600  # one step of compressed time
B_PEOPLE = ((101, 0.70), (102, 0.15), (103, 0.15))
SUB_CYCLES = 40  # consecutive cycles per step at most (each places or reclaims one unit)


@dataclass
class Job:
    wid: int
    quota_id: int
    owner: int
    hours_left: int
    ran: int = 0  # hours run since its last (re)start
    where: Assignment | None = None
    started_hour: int = 0


@dataclass
class Month:
    """One simulated month's outcome."""

    gpu_hours: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TEAMS, 0.0))
    lost_gpu_hours: float = 0.0
    reclaimed_jobs: int = 0
    within_min_wait_hours: float = 0.0
    b_people: dict[int, float] = field(default_factory=lambda: dict.fromkeys(dict(B_PEOPLE), 0.0))


def _spec_now(base: list[QuotaSpec], jobs: dict[int, Job], equal_share: bool) -> list[QuotaSpec]:
    if not equal_share:
        return list(base)
    b = base[1].quota_id
    people = {j.owner for j in jobs.values() if j.quota_id == b}
    used = {
        owner: 1000 * sum(1 for j in jobs.values() if j.owner == owner and j.where is not None)
        for owner in people
    }
    return [
        replace(s, equal_share=EqualShare(len(people), used)) if s.quota_id == b else s
        for s in base
    ]


def _cycle(
    base: list[QuotaSpec], jobs: dict[int, Job], equal_share: bool, hour: int
) -> CycleDecision:
    running = tuple(
        (
            replace(
                usage(j.wid, j.quota_id, active=True, started=hour * 60 - j.ran * 60),
                owner_id=j.owner,
            ),
            j.where.node,
            j.where.gpu_indices,
        )
        for j in sorted(jobs.values(), key=lambda j: j.wid)
        if j.where is not None
    )
    waiting = tuple(
        replace(
            pending(j.wid, j.quota_id, minute=hour * 60 + j.wid % 60),
            usage=replace(usage(j.wid, j.quota_id), owner_id=j.owner),
        )
        for j in sorted(jobs.values(), key=lambda j: j.wid)
        if j.where is None
    )
    return decide(
        cycle_input(_spec_now(base, jobs, equal_share), NODES, running=running, waiting=waiting)
    )


def simulate(*, notice_seconds: int, equal_share: bool) -> Month:
    rng = random.Random(17)
    base = specs()
    month = Month()
    jobs: dict[int, Job] = {}
    live: dict[int, LiveNotice] = {}  # workload id -> its notice
    next_id = 0
    for hour in range(HOURS):
        now = START + timedelta(hours=hour)
        # jobs that ran out finish; each team tops up to (or withdraws waiting jobs down to) its demand
        for wid in [w for w, j in jobs.items() if j.where is not None and j.hours_left <= 0]:
            del jobs[wid]
            live.pop(wid, None)
        for spec in base:
            wanted = demand(spec.name, hour, rng)
            mine = [j for j in jobs.values() if j.quota_id == spec.quota_id]
            for job in sorted((j for j in mine if j.where is None), key=lambda j: -j.wid)[
                : max(0, len(mine) - wanted)
            ]:
                del jobs[job.wid]
            for _ in range(max(0, wanted - len(mine))):
                next_id += 1
                owner = (
                    rng.choices([p for p, _ in B_PEOPLE], [w for _, w in B_PEOPLE])[0]
                    if spec.name == "team-b"
                    else spec.quota_id
                )
                jobs[next_id] = Job(next_id, spec.quota_id, owner, rng.randint(3, 6))
        # consecutive cycles until nothing changes
        for _ in range(SUB_CYCLES):
            decision = _cycle(base, jobs, equal_share, hour)
            changed = False
            for a in decision.placements:
                job = jobs[int(a.request_id)]
                job.where, job.ran, job.started_hour = a, 0, hour
                changed = True
            claim = decision.reclaim
            victims = claim.victims if claim is not None else ()
            plan = plan_notices(
                victims, list(live.values()), now=now, notice_seconds=notice_seconds
            )
            for notice_id in plan.cancel:
                live = {w: n for w, n in live.items() if n.notice_id != notice_id}
            for victim in plan.stop_now:
                for wid in victim.workload_ids:
                    job = jobs[wid]
                    polite = wid in live
                    month.lost_gpu_hours += 0 if polite else job.ran
                    if not polite:
                        job.hours_left += job.ran  # restarts from scratch
                    job.where, job.ran = None, 0
                    live.pop(wid, None)
                    month.reclaimed_jobs += 1
                    changed = True
            for new in plan.give:
                live[new.workload_id] = LiveNotice(new.workload_id, new.workload_id, new.deadline)
                changed = True
            if not changed:
                break
        # the hour runs
        for job in jobs.values():
            if job.where is not None:
                job.hours_left -= 1
                job.ran += 1
                team = base[job.quota_id - 1].name
                month.gpu_hours[team] += 1
                if team == "team-b":
                    month.b_people[job.owner] += 1
        for spec in base:
            mine = [j for j in jobs.values() if j.quota_id == spec.quota_id]
            held = sum(1 for j in mine if j.where is not None)
            short = max(0, 8 - held)  # every team's min is 8 GPUs
            month.within_min_wait_hours += min(short, sum(1 for j in mine if j.where is None))
    return month


def table(title: str, month: Month) -> list[str]:
    delivered = sum(month.gpu_hours.values())
    share = delivered / len(TEAMS)
    teams = ", ".join(
        f"{team} {hours:.0f} ({hours / share:.0%})" for team, hours in month.gpu_hours.items()
    )
    people = ", ".join(f"b{p - 100} {h:.0f}" for p, h in month.b_people.items())
    return [
        title,
        f"  GPU-hours (of fair share): {teams}",
        f"  team-b by person: {people}",
        f"  reclaimed jobs {month.reclaimed_jobs}, GPU-hours of work lost {month.lost_gpu_hours:.0f}, "
        f"GPU-hours a team waited below its min {month.within_min_wait_hours:.0f}",
    ]


@pytest.mark.slow
def test_a_month_with_immediate_and_polite_reclaim_and_equal_shares() -> None:
    immediate = simulate(notice_seconds=0, equal_share=False)
    polite = simulate(notice_seconds=NOTICE_SECONDS, equal_share=False)
    shared = simulate(notice_seconds=NOTICE_SECONDS, equal_share=True)
    print()  # noqa: T201 - the table of the month (pytest -s)
    for line in (
        *table("immediate reclaim", immediate),
        *table("polite reclaim, one-hour notice", polite),
        *table("polite reclaim, team-b's borrowing shared equally among its people", shared),
    ):
        print(line)  # noqa: T201
    # polite reclaim loses no work: the stopped jobs checkpointed at their notice ...
    assert immediate.lost_gpu_hours > 0
    assert polite.lost_gpu_hours == 0
    # ... and the price is paid by the teams below their min, who wait for the notice to run out
    assert polite.within_min_wait_hours > immediate.within_min_wait_hours
    # equal shares take some of team-b's borrowed GPUs from its heaviest person for the two others
    assert shared.b_people[101] < polite.b_people[101]
    assert shared.b_people[102] + shared.b_people[103] > polite.b_people[102] + polite.b_people[103]
    # the exact month (seeded): what docs/quotas.md shows
    assert (immediate.gpu_hours, immediate.lost_gpu_hours, immediate.reclaimed_jobs) == (
        {"team-a": 9536.0, "team-b": 3184.0, "team-c": 4500.0},
        161.0,
        80,
    )
    assert (polite.gpu_hours, polite.within_min_wait_hours, polite.reclaimed_jobs) == (
        {"team-a": 9587.0, "team-b": 3108.0, "team-c": 4530.0},
        59.0,
        9,
    )
    assert shared.b_people == {101: 2102.0, 102: 449.0, 103: 523.0}
