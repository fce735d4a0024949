"""Reclaim planning: which running work to stop so that a quota gets the share it is entitled to.

When a pending request is admitted (it fits its quota's runtime share, see quotas.admission) but the group
has no free capacity for it, capacity lent to siblings comes back. Victims are chosen among the quotas of
the same group running above their runtime share (`used > runtime`, the runtime computed with the pending
request counted in the demand), on the same side:

- preemptible work only — a gang with any non-preemptible member is never chosen;
- **whole gangs only**: a gang is one unit (all its active members) or nothing;
- lowest priority first, then most recently started first, then name;
- a quota gives back at most what it runs above its runtime share (a last whole gang may overshoot);
- then "assign back" (as Koordinator's revoke controller): chosen units whose removal is not needed to
  cover the shortfall are kept running, newest choice first.

If the shortfall cannot be covered, the plan for that request is empty (nothing is stopped for nothing).
The scheduling service executes the plan (codespaces are stopped with a grace period and a notice, their
home kept); this module only decides. Pure given a snapshot.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any

from quotas.admission import check_request
from quotas.resources import Resources, Side, human, human_amount, total
from quotas.usage import GroupSnapshot, WorkloadUsage, usage_of


@dataclass(frozen=True, slots=True)
class Victim:
    """A unit of work to stop: one workload, or all active members of one gang."""

    workload_ids: tuple[int, ...]
    gang_id: int | None
    name: str
    kinds: tuple[str, ...]
    quota_id: int
    quota_name: str
    side: Side
    priority: int
    freed: Resources
    reason: str
    started_at: datetime | None = None
    """When the unit started (its last member); None when it has not yet (it counts as just started)."""

    @property
    def order(self) -> tuple[int, timedelta, str, int]:
        """Reclaim's order as a key (lowest first): priority, most recently started, name, first id."""
        since = _LATEST - self.started_at if self.started_at is not None else timedelta(0)
        return (self.priority, since, self.name, self.workload_ids[0])


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """What the plan decided for one pending request (a workload or a whole pending gang)."""

    workload_ids: tuple[int, ...]
    quota_id: int
    side: Side
    request: Resources
    needed: Resources
    satisfied: bool
    reason: str


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """The victims to stop (in order), and per pending request whether it is covered and why."""

    victims: tuple[Victim, ...]
    claims: tuple[ClaimOutcome, ...]

    @property
    def satisfied(self) -> bool:
        return all(claim.satisfied for claim in self.claims)

    @property
    def workload_ids(self) -> tuple[int, ...]:
        return tuple(wid for victim in self.victims for wid in victim.workload_ids)

    @property
    def is_empty(self) -> bool:
        return not self.victims


@dataclass(frozen=True, slots=True)
class _Unit:
    members: tuple[WorkloadUsage, ...]
    gang_id: int | None
    name: str
    quota_id: int
    side: Side
    priority: int
    started_at: datetime
    freed: Resources


_LATEST = datetime.max.replace(tzinfo=UTC)


def _in_order(units: list[_Unit]) -> list[_Unit]:
    """Reclaim's order of units: lowest priority first, most recently started first, then name and
    ids for determinism. Sorted stably from the last key to the first, each on one attribute (a large
    group has thousands of units); units are disjoint, so their first ids order them as all would."""
    units.sort(key=_first_id)
    units.sort(key=attrgetter("name"))
    units.sort(key=attrgetter("started_at"), reverse=True)
    units.sort(key=attrgetter("priority"))
    return units


def _first_id(unit: _Unit) -> int:
    return unit.members[0].workload_id


def with_whole_gangs(
    chosen: Iterable[int], active: Iterable[tuple[int, int | None]]
) -> tuple[int, ...]:
    """The gang rule, for every path that stops running work (reclaim here, requeue after a fault in
    scheduling.services.workloads): a gang is one unit, all its active members or none of them.

    Args:
        chosen: the workload ids picked to stop.
        active: (workload id, gang id or None) of the active work the chosen ids belong to.

    Returns:
        The chosen ids plus every active member of a gang any chosen id belongs to, ascending.
    """
    pairs = list(active)
    picked = set(chosen)
    gangs = {gang_id for wid, gang_id in pairs if gang_id and wid in picked}
    return tuple(sorted(picked | {wid for wid, gang_id in pairs if gang_id in gangs}))


def _units(
    snapshot: GroupSnapshot,
    side: Side,
    protect_started_after: datetime | None = None,
    among: Collection[int] | None = None,
    units_of: Sequence[WorkloadUsage] | None = None,
) -> list[_Unit]:
    """Active work on `side` grouped into reclaimable units; units with non-preemptible work are dropped,
    and so are units that started after `protect_started_after` (minimum runtime before preemption;
    a unit with no start time yet counts as just started), and, with `among`, units with a member
    not in it. The work is `units_of` when given (each gang with all its active members), else the
    snapshot's workloads."""
    workloads = snapshot.workloads if units_of is None else units_of
    grouped: dict[tuple[str, int], list[WorkloadUsage]] = {}
    for w in workloads:
        if not w.active or w.side is not side or (among is not None and w.workload_id not in among):
            continue
        key = ("gang", w.gang_id) if w.gang_id else ("workload", w.workload_id)
        grouped.setdefault(key, []).append(w)
    # A gang spanning sides is still one unit: all its active members, whatever their side.
    if any(key[0] == "gang" for key in grouped):
        active = {w.workload_id: w for w in workloads if w.active}
        pairs = [(w.workload_id, w.gang_id) for w in active.values() if w.gang_id]
        for key, members in grouped.items():
            if key[0] == "gang":
                members[:] = [
                    active[wid] for wid in with_whole_gangs((m.workload_id for m in members), pairs)
                ]
    units = []
    dims = side.dimensions
    for members in grouped.values():
        first = members[0]
        if len(members) == 1:  # most units on a large cluster: one workload, no gang
            if not first.preemptible:
                continue
            started = first.started_at or _LATEST
            if protect_started_after is not None and started > protect_started_after:
                continue
            units.append(
                _Unit(
                    (first,), first.gang_id, (first.gang_name or first.name) if first.gang_id
                    else first.name, first.quota_id, side, first.priority, started,
                    first.resources.only(dims),
                )
            )  # fmt: skip
            continue
        if not all(m.preemptible for m in members):
            continue
        if among is not None and not all(m.workload_id in among for m in members):
            continue
        starts = [m.started_at or _LATEST for m in members]
        if protect_started_after is not None and max(starts) > protect_started_after:
            continue
        units.append(
            _Unit(
                members=tuple(sorted(members, key=lambda m: m.workload_id)),
                gang_id=first.gang_id,
                name=first.gang_name or first.name if first.gang_id else first.name,
                quota_id=first.quota_id,
                side=side,
                priority=max(m.priority for m in members),
                started_at=max(starts),
                freed=total(m.resources.only(dims) for m in members if m.side is side),
            )
        )
    return _in_order(units)


def _covers(freed: Resources, need: Resources, dims: tuple[str, ...]) -> bool:
    return all(freed.get(d) >= need.get(d) for d in dims)


def _describe_unit(unit: _Unit, side: Side) -> str:
    kinds = sorted({m.kind for m in unit.members})
    if unit.gang_id:
        what = f"gang {unit.name} ({len(unit.members)} pods)"
    else:
        what = f"{kinds[0].replace('_', ' ')} {unit.name}"
    primary = "gpu_milli" if side is Side.GPU else "cpu_milli"
    started = (
        unit.started_at.strftime("%Y-%m-%d %H:%M")
        if unit.started_at != _LATEST
        else "not yet started"
    )
    return (
        f"{what}, {human_amount(primary, unit.freed.get(primary))}, priority {unit.priority}, "
        f"started {started}"
    )


def _claims(pending: Any) -> list[list[WorkloadUsage]]:
    """Pending work grouped into requests: one per workload, one per gang."""
    items = list(pending) if isinstance(pending, list | tuple) else [pending]
    usages = [item if isinstance(item, WorkloadUsage) else usage_of(item) for item in items]
    grouped: dict[tuple[str, int], list[WorkloadUsage]] = {}
    for index, usage in enumerate(usages):
        key = ("gang", usage.gang_id) if usage.gang_id else ("one", usage.workload_id or -index)
        grouped.setdefault(key, []).append(usage)
    return list(grouped.values())


def plan_reclaim(
    snapshot: GroupSnapshot,
    pending: Any,
    *,
    shortfall: Resources | None = None,
    protect_started_after: datetime | None = None,
    among: Collection[int] | None = None,
    units_of: Sequence[WorkloadUsage] | None = None,
) -> ReclaimPlan:
    """Choose the work to stop so that `pending` can start.

    `protect_started_after`: work that started after this moment is never chosen (the group's minimum
    runtime before preemption: `now - QuotaGroup.min_runtime_seconds`; None = no protection).

    Args:
        snapshot: the group's snapshot (quotas.usage.group_snapshot).
        pending: a pending Workload, a list of them (a gang's members are one request), or WorkloadUsage.
        shortfall: what has to be freed for a single request, when the caller knows better than "request
            minus the group's free capacity" (e.g. the placement engine needs a whole node free).
        among: when given, only units whose members are all in it may be chosen (the scheduling cycle
            passes the victims it chose node by node, see scheduling.services.reclaim_fit).
        units_of: the workloads units are made of, when not the snapshot's own (a snapshot of summed
            usage gives the quota figures, and these rows, each gang whole, the units to choose among).

    Returns:
        ReclaimPlan: victims in the order to stop them, each with a reason, and an outcome per request.
    """
    claims = _claims(pending)
    counted = snapshot.pending_ids
    missing = [
        u for claim in claims for u in claim if not (u.workload_id and u.workload_id in counted)
    ]
    if missing:
        snapshot = snapshot.with_workloads([replace(u, active=False) for u in missing])
    chosen: list[Victim] = []
    outcomes: list[ClaimOutcome] = []
    taken: set[int] = set()
    freed_so_far = {Side.GPU: Resources(), Side.CPU: Resources()}
    promised = {Side.GPU: Resources(), Side.CPU: Resources()}

    for claim in claims:
        ids = tuple(u.workload_id for u in claim)
        for side in (Side.GPU, Side.CPU):
            on_side = [u for u in claim if u.side is side]
            if not on_side:
                continue
            dims = side.dimensions
            request = total(u.resources.only(dims) for u in on_side)
            quota_id = on_side[0].quota_id
            admission = check_request(
                snapshot,
                quota_id,
                side,
                request,
                preemptible=all(u.preemptible for u in on_side),
                already_counted=True,
            )
            if not admission.allowed:
                outcomes.append(
                    ClaimOutcome(
                        ids,
                        quota_id,
                        side,
                        request,
                        Resources(),
                        False,
                        f"not entitled to reclaim: {admission.reason}",
                    )
                )
                continue
            free = (snapshot.free(side) + freed_so_far[side] - promised[side]).clip()
            need = (request - free).only(dims).clip()
            if shortfall is not None and len(claims) == 1:
                need = shortfall.only(dims).clip()
            if need.is_zero():
                promised[side] = promised[side] + request
                outcomes.append(
                    ClaimOutcome(
                        ids,
                        quota_id,
                        side,
                        request,
                        need,
                        True,
                        "fits in the group's free capacity; nothing to reclaim",
                    )
                )
                continue
            remaining_over = {
                q.quota_id: q.side(side).over_runtime
                for q in snapshot.quotas.values()
                if q.quota_id != quota_id
            }
            picked: list[_Unit] = []
            still_needed = need
            for unit in _units(snapshot, side, protect_started_after, among, units_of):
                if unit.quota_id == quota_id or unit.quota_id not in remaining_over:
                    continue
                if any(m.workload_id in taken for m in unit.members):
                    continue
                if among is not None and not all(m.workload_id in among for m in unit.members):
                    continue
                over = remaining_over[unit.quota_id]
                useful = any(
                    still_needed.get(d) > 0 and over.get(d) > 0 and unit.freed.get(d) > 0
                    for d in dims
                )
                if not useful:
                    continue
                picked.append(unit)
                remaining_over[unit.quota_id] = (over - unit.freed).clip()
                still_needed = (still_needed - unit.freed).clip()
                if still_needed.is_zero():
                    break
            claimant = snapshot.quota(quota_id)
            if not still_needed.is_zero():
                outcomes.append(
                    ClaimOutcome(
                        ids,
                        quota_id,
                        side,
                        request,
                        need,
                        False,
                        f"{claimant.name} {side.label}: needs {human(need, dims)} freed but sibling "
                        f"quotas run only {human(total(u.freed for u in picked), dims)} of preemptible "
                        "work above their runtime share; nothing is reclaimed.",
                    )
                )
                continue
            # Assign back: keep running whatever is not needed, newest choice first.
            # (a running sum: what the others free is the sum less this one; linear, not quadratic)
            kept_total = total(u.freed for u in picked)
            for unit in list(reversed(picked)):
                rest = kept_total - unit.freed
                if _covers(rest, need, dims):
                    picked.remove(unit)
                    kept_total = rest
            for unit in picked:
                owner = snapshot.quota(unit.quota_id).side(side)
                primary = "gpu_milli" if side is Side.GPU else "cpu_milli"
                reason = (
                    f"{snapshot.quota(unit.quota_id).name} {side.label} uses "
                    f"{human_amount(primary, owner.used.get(primary))}, above its runtime share of "
                    f"{human_amount(primary, owner.runtime.get(primary))} (min "
                    f"{human_amount(primary, owner.min.get(primary))}): reclaiming "
                    f"{_describe_unit(unit, side)} for {claimant.name}'s pending request of "
                    f"{human_amount(primary, request.get(primary))}"
                    f"{' within its min' if admission.within_min else ''}."
                )
                chosen.append(_victim(snapshot, unit, side, reason))
                taken.update(m.workload_id for m in unit.members)
                freed_so_far[side] = freed_so_far[side] + unit.freed
            promised[side] = promised[side] + request
            outcomes.append(
                ClaimOutcome(
                    ids,
                    quota_id,
                    side,
                    request,
                    need,
                    True,
                    f"{claimant.name} {side.label}: reclaiming {len(picked)} unit(s) freeing "
                    f"{human(total(u.freed for u in picked), dims)} (needed {human(need, dims)}).",
                )
            )
    return ReclaimPlan(victims=tuple(chosen), claims=tuple(outcomes))


def _victim(snapshot: GroupSnapshot, unit: _Unit, side: Side, reason: str) -> Victim:
    """The Victim that stopping `unit` (a whole gang or one workload) on `side` makes."""
    members = unit.members
    return Victim(
        workload_ids=(members[0].workload_id,)
        if len(members) == 1
        else tuple(m.workload_id for m in members),
        gang_id=unit.gang_id,
        name=unit.name,
        kinds=(members[0].kind,) if len(members) == 1 else tuple(sorted({m.kind for m in members})),
        quota_id=unit.quota_id,
        quota_name=snapshot.quotas[unit.quota_id].spec.name,
        side=side,
        priority=unit.priority,
        freed=unit.freed,
        reason=reason,
        started_at=None if unit.started_at == _LATEST else unit.started_at,
    )


def reclaimable(
    snapshot: GroupSnapshot,
    pending: Any,
    *,
    protect_started_after: datetime | None = None,
    units_of: Sequence[WorkloadUsage] | None = None,
) -> tuple[Victim, ...]:
    """Every unit the quota rules let `pending` (one request: a workload or a gang's members) take
    back, in the order reclaim prefers them: the claimant must be entitled to reclaim on its side
    (quotas.admission), and a unit must be whole, preemptible, past the minimum runtime, and belong to a
    sibling quota running above its runtime share in a dimension the unit frees. No budget is applied
    (how much a quota gives back is `plan_reclaim`'s rule); a caller choosing where capacity is freed
    picks among these and then asks `plan_reclaim(..., among=...)` for the plan, whose victims carry
    the reasons shown to people (a candidate's reason only says it may be reclaimed: a large group has
    thousands of candidates and describes the few it stops). `units_of`: as in `plan_reclaim` (only the
    units made of these rows are listed)."""
    out: list[Victim] = []
    for side, over in _sources(snapshot, pending):
        for unit in _units(snapshot, side, protect_started_after, units_of=units_of):
            above = over.get(unit.quota_id)
            if not above or not any(getattr(unit.freed, d) > 0 for d in above):
                continue
            out.append(_victim(snapshot, unit, side, "may be reclaimed"))
    return tuple(out)


def may_reclaim(snapshot: GroupSnapshot, pending: Any) -> bool:
    """Whether `reclaimable` could list anything for `pending` at all: it is entitled to reclaim on a
    side where some sibling quota runs above its runtime share. Reads no workload one by one."""
    return any(any(over.values()) for _, over in _sources(snapshot, pending))


def _sources(
    snapshot: GroupSnapshot, pending: Any
) -> list[tuple[Side, dict[int, tuple[str, ...]]]]:
    """Per side on which `pending` is entitled to reclaim: per sibling quota, the dimensions of that
    side it runs above its runtime share in."""
    claims = _claims(pending)
    counted = snapshot.pending_ids
    missing = [
        u for claim in claims for u in claim if not (u.workload_id and u.workload_id in counted)
    ]
    if missing:
        snapshot = snapshot.with_workloads([replace(u, active=False) for u in missing])
    out = []
    for claim in claims:
        for side in (Side.GPU, Side.CPU):
            on_side = [u for u in claim if u.side is side]
            if not on_side:
                continue
            dims = side.dimensions
            quota_id = on_side[0].quota_id
            admission = check_request(
                snapshot,
                quota_id,
                side,
                total(u.resources.only(dims) for u in on_side),
                preemptible=all(u.preemptible for u in on_side),
                already_counted=True,
            )
            if not admission.allowed:
                continue
            out.append(
                (
                    side,
                    {
                        q.quota_id: tuple(d for d in dims if q.side(side).over_runtime.get(d) > 0)
                        for q in snapshot.quotas.values()
                        if q.quota_id != quota_id
                    },
                )
            )
    return out


def victims_for(snapshot: GroupSnapshot, pending: Sequence[Any]) -> tuple[int, ...]:
    """The workload ids `plan_reclaim` would stop (convenience for callers that only need ids)."""
    return plan_reclaim(snapshot, list(pending)).workload_ids
