"""Admission: may a quota start this request now? If not, a reason with numbers the user sees.

Koordinator's PreFilter (k8s-integration.md §3.3) on the workload's side of its quota, in this order
(after rule 0, the quota's per-person GPU cap, `max_gpus_per_user`, code `user_cap`, checked on the
owner's placed and running GPUs plus what the session admitted for them):
1. `used + request ≤ max` in every dimension (code `quota_max`);
2. the request fits the side's capacity of the group at all (code `exceeds_capacity`);
3. non-preemptible work: `non-preemptible used + request ≤ min` in every dimension the quota guarantees
   (min > 0; a side with no min admits no non-preemptible work) (code `nonpreemptible_beyond_min`);
4. a GPU-hour budget at 100 % (`QuotaSpec.budget`, quotas.budgets) stops new borrowing: a GPU-side
   request beyond min waits; a `hard` budget stops every new GPU request (code `budget_exhausted`);
5. `used + request ≤ runtime`, the runtime share computed with the request counted in the demand (code
   `quota_runtime`);
6. a quota that shares its borrowing equally (`Quota.equal_borrowing_share`, data in
   `QuotaSpec.equal_share`): a GPU request beyond min may not take its owner past an equal share of the
   min plus the team's borrowing (runtime share − min) ÷ its active users (code `equal_share`).
`within_min` tells the caller whether the request runs within the guaranteed min (then it may reclaim
borrowed capacity from siblings; see quotas.reclaim).

One path: `AdmissionSession(snapshot)` admits requests one after another against one reading of the
group and counts what it admitted, so the next request must fit on top of it (rules 1, 3 and 4 again,
with the session's admitted work added). The scheduling cycle admits its candidates through one session;
the picker and the what-if preview (`check_admission`) admit one request through a fresh one, so they
say exactly what the cycle would decide for a request at the head of the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from quotas.fairness import BudgetState
from quotas.resources import Resources, Side, human_amount, human_number, total
from quotas.usage import GroupSnapshot, WorkloadUsage, group_snapshot, usage_of


class AdmissionCode(str, Enum):
    ADMITTED = "admitted"
    OVER_MAX = "quota_max"
    EXCEEDS_CAPACITY = "exceeds_capacity"
    NONPREEMPTIBLE_BEYOND_MIN = "nonpreemptible_beyond_min"
    OVER_RUNTIME = "quota_runtime"
    NO_QUOTA = "no_quota"
    BUDGET_EXHAUSTED = "budget_exhausted"
    USER_CAP = "user_cap"
    EQUAL_SHARE = "equal_share"


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer: `allowed`, a stable `code` (AdmissionCode value), a `reason` sentence with numbers, and
    whether the request runs within the quota's min."""

    allowed: bool
    code: str
    reason: str
    within_min: bool


def _first_over(amount: Resources, limit: Resources, dimensions: tuple[str, ...]) -> str | None:
    for dimension in dimensions:
        if amount.get(dimension) > limit.get(dimension):
            return dimension
    return None


def guaranteed_dimensions(minimum: Resources, dims: tuple[str, ...]) -> tuple[str, ...]:
    """The dimensions in which a quota guarantees something (min > 0); the others are best effort."""
    return tuple(d for d in dims if minimum.get(d) > 0)


def is_within_min(amount: Resources, minimum: Resources, dims: tuple[str, ...]) -> bool:
    """True when `amount` fits the min in every dimension the quota guarantees (and it guarantees some)."""
    guaranteed = guaranteed_dimensions(minimum, dims)
    return bool(guaranteed) and all(amount.get(d) <= minimum.get(d) for d in guaranteed)


def _primary(request: Resources, side: Side) -> str:
    """The dimension to speak about when all fit: GPUs on the GPU side, CPUs on the CPU side."""
    return "gpu_milli" if side is Side.GPU and request.gpu_milli else "cpu_milli"


def check_request(
    snapshot: GroupSnapshot,
    quota_id: int,
    side: Side,
    request: Resources,
    *,
    preemptible: bool = True,
    already_counted: bool = False,
) -> Admission:
    """Pure admission of `request` on one side of one quota in `snapshot`.

    `already_counted`: the request is already part of the snapshot's pending demand (a saved PENDING
    workload); otherwise it is added to the demand before the runtime is computed.
    """
    request = request.only(side.dimensions)
    if not already_counted:
        snapshot = snapshot.with_workloads(
            [
                WorkloadUsage(
                    workload_id=0,
                    name="(request)",
                    kind="request",
                    quota_id=quota_id,
                    side=side,
                    resources=request,
                    active=False,
                    preemptible=preemptible,
                )
            ]
        )
    state = snapshot.quota(quota_id)
    usage = state.side(side)
    label = f"{state.name} {side.label}"
    dims = side.dimensions
    after = usage.used + request
    within_min = is_within_min(after, usage.min, dims)

    over = _first_over(after, usage.max, dims)
    if over is not None:
        what = (
            ""
            if usage.max.get(over)
            else f" (this quota allows no {human_amount(over, 0).split(' ', 1)[1]} on its {side.label})"
        )
        return Admission(
            False,
            AdmissionCode.OVER_MAX.value,
            f"{label}: {human_number(over, usage.used.get(over))} of max "
            f"{human_amount(over, usage.max.get(over))} in use, request "
            f"{human_number(over, request.get(over))}{what}.",
            within_min,
        )
    refusal = _budget_refusal(state.spec.budget, label, side, usage.min, after)
    if refusal is not None:
        return refusal
    capacity = snapshot.capacity.side(side)
    over = _first_over(request, capacity, dims)
    if over is not None:
        return Admission(
            False,
            AdmissionCode.EXCEEDS_CAPACITY.value,
            f"{label}: request {human_amount(over, request.get(over))} is more than the "
            f"{side.label} capacity of group {snapshot.group_name} "
            f"({human_amount(over, capacity.get(over))}).",
            within_min,
        )
    if not preemptible:
        np_after = usage.nonpreemptible_used + request
        guaranteed = guaranteed_dimensions(usage.min, dims)
        over = _first_over(np_after, usage.min, guaranteed) if guaranteed else dims[0]
        if over is not None:
            return Admission(
                False,
                AdmissionCode.NONPREEMPTIBLE_BEYOND_MIN.value,
                f"{label}: non-preemptible work may only run within min: "
                f"{human_number(over, usage.nonpreemptible_used.get(over))} of min "
                f"{human_amount(over, usage.min.get(over))} held by non-preemptible work, request "
                f"{human_number(over, request.get(over))}. Mark it preemptible to borrow idle capacity.",
                within_min,
            )
    over = _first_over(after, usage.runtime, dims)
    if over is not None:
        return Admission(
            False,
            AdmissionCode.OVER_RUNTIME.value,
            f"{label}: {human_number(over, usage.used.get(over))} in use + request "
            f"{human_number(over, request.get(over))} is more than its runtime share of "
            f"{human_amount(over, usage.runtime.get(over))} (min "
            f"{human_number(over, usage.min.get(over))}, max {human_number(over, usage.max.get(over))}); "
            f"sibling quotas are using or asking for the rest of the group's capacity.",
            within_min,
        )
    dimension = _primary(request, side)
    borrowing = (after - usage.min).clip().get(dimension)
    if within_min:
        detail = f"within min {human_amount(dimension, usage.min.get(dimension))}"
    else:
        detail = (
            f"borrowing {human_amount(dimension, borrowing)} beyond min "
            f"{human_number(dimension, usage.min.get(dimension))}, reclaimable when others need it"
        )
    return Admission(
        True,
        AdmissionCode.ADMITTED.value,
        f"{label}: {human_number(dimension, usage.used.get(dimension))} in use + request "
        f"{human_number(dimension, request.get(dimension))} of runtime share "
        f"{human_amount(dimension, usage.runtime.get(dimension))} ({detail}).",
        within_min,
    )


def _budget_refusal(
    budget: BudgetState | None, label: str, side: Side, minimum: Resources, after: Resources
) -> Admission | None:
    """Rule 4: the refusal when the quota's budget is exhausted and the request (with everything it
    holds, `after`) borrows beyond min, or the budget is hard. None when the budget lets it start."""
    if budget is None or side is not Side.GPU or not budget.exhausted:
        return None
    within_min = is_within_min(after, minimum, side.dimensions)
    if budget.hard:
        return Admission(
            False,
            AdmissionCode.BUDGET_EXHAUSTED.value,
            f"{label}: GPU-hour budget exhausted ({budget.numbers()}, {budget.percent} %); the budget is "
            "hard, so nothing new starts until the period resets or an operator tops it up.",
            within_min,
        )
    if within_min:
        return None
    return Admission(
        False,
        AdmissionCode.BUDGET_EXHAUSTED.value,
        f"{label}: GPU-hour budget exhausted ({budget.numbers()}, {budget.percent} %); new borrowing "
        f"beyond min {human_amount('gpu_milli', minimum.gpu_milli)} stops until the period resets or "
        "an operator tops it up (work within min still starts).",
        within_min,
    )


class AdmissionSession:
    """Admits requests one after another against one snapshot of a group, counting what it admitted.

    `admit(members)` answers for one request (a workload, or the members of one gang: same quota, one
    request per side) and, when it is allowed, adds it to the session's tally; `unadmit(members)` gives
    back the tally of admitted members that found no capacity. A request is allowed when the rules of
    `check_request` pass on the snapshot and, on top of what the session admitted before, it still fits
    the quota's runtime share and max (`quota_runtime`), and non-preemptible work its guaranteed min
    (`nonpreemptible_beyond_min`). Pure: no database access.
    """

    def __init__(self, snapshot: GroupSnapshot) -> None:
        self.snapshot = snapshot
        self._admitted: dict[tuple[int, Side], Resources] = {}
        self._admitted_nonpreemptible: dict[tuple[int, Side], Resources] = {}
        self._admitted_by_user: dict[tuple[int, int], int] = {}

    def share_ratio(self, quota_id: int, side: Side) -> float:
        """How far a quota is along its runtime share on `side` (used / runtime, primary dimension):
        lower = further below its share = served first (fair share)."""
        if quota_id not in self.snapshot.quotas:
            return 0.0
        usage = self.snapshot.quota(quota_id).side(side)
        dimension = "gpu_milli" if side is Side.GPU else "cpu_milli"
        runtime = usage.runtime.get(dimension)
        used = usage.used.get(dimension)
        if runtime <= 0:
            return float("inf") if used or usage.demand.get(dimension) else 0.0
        return used / runtime

    def fair_share_ratio(self, quota_id: int) -> float:
        """The quota's decayed usage over its fair share (quotas.fairness); 0 when its group has fair
        share off. Lower = used less than its share recently = served first among equal priorities."""
        if quota_id not in self.snapshot.quotas:
            return 0.0
        fair = self.snapshot.quota(quota_id).spec.fair_share
        return fair.ratio if fair is not None else 0.0

    def admit(self, members: Sequence[WorkloadUsage], *, counted: bool | None = None) -> Admission:
        """May the request of `members` start now, after what this session admitted before?

        `counted`: True when every member is already part of the snapshot's pending demand (the cycle's
        PENDING rows), False when none is (an unsaved request); None decides per member by
        `snapshot.pending_ids`. Members not counted are added to the demand before the runtime shares
        are computed."""
        if not members:
            raise ValueError("AdmissionSession.admit: no workload given")
        quota_id = members[0].quota_id
        if quota_id not in self.snapshot.quotas:
            return Admission(
                False,
                AdmissionCode.NO_QUOTA.value,
                f"Quota {quota_id} is not in group {self.snapshot.group_name}.",
                False,
            )
        refusal = self._check_user_cap(quota_id, members)
        if refusal is not None:
            return refusal
        snapshot = self._with_demand(members, counted)
        result: Admission | None = None
        sides = [(side, [u for u in members if u.side is side]) for side in (Side.GPU, Side.CPU)]
        for side, on_side in sides:
            if not on_side:
                continue
            request = total(u.resources for u in on_side).only(side.dimensions)
            preemptible = all(u.preemptible for u in on_side)
            answer = check_request(
                snapshot, quota_id, side, request, preemptible=preemptible, already_counted=True
            )
            if answer.allowed:
                answer = self._check_after_admitted(
                    snapshot, quota_id, side, request, preemptible, answer
                )
            if answer.allowed and side is Side.GPU:
                answer = self._check_equal_share(snapshot, quota_id, on_side, answer)
            if not answer.allowed:
                return answer
            result = answer if result is None else _both(result, answer)
        assert result is not None
        for member in members:
            if member.owner_id is not None:
                key = (quota_id, member.owner_id)
                self._admitted_by_user[key] = (
                    self._admitted_by_user.get(key, 0) + member.resources.gpu_milli
                )
        for side, on_side in sides:
            if on_side:
                request = total(u.resources for u in on_side).only(side.dimensions)
                held = not all(u.preemptible for u in on_side)
                self._count((quota_id, side), request, nonpreemptible=held)
        return result

    def _check_user_cap(self, quota_id: int, members: Sequence[WorkloadUsage]) -> Admission | None:
        """Rule 0: the quota's per-person cap (`QuotaSpec.user_cap`): what the owner holds, plus what
        this session admitted for them, plus the request must stay within it (code `user_cap`)."""
        cap = self.snapshot.quota(quota_id).spec.user_cap
        if cap is None:
            return None
        wanted: dict[int, int] = {}
        for member in members:
            if member.owner_id is not None and member.resources.gpu_milli:
                wanted[member.owner_id] = (
                    wanted.get(member.owner_id, 0) + member.resources.gpu_milli
                )
        name = self.snapshot.quota(quota_id).name
        for owner_id, request in sorted(wanted.items()):
            held = cap.used_by(owner_id)
            admitted = self._admitted_by_user.get((quota_id, owner_id), 0)
            if held + admitted + request > cap.cap_milli:
                return Admission(
                    False,
                    AdmissionCode.USER_CAP.value,
                    f"{name}: one person may hold at most {human_amount('gpu_milli', cap.cap_milli)} "
                    f"of this quota; its owner holds {human_number('gpu_milli', held)}"
                    + (
                        f" + {human_number('gpu_milli', admitted)} admitted this cycle"
                        if admitted
                        else ""
                    )
                    + f", request {human_number('gpu_milli', request)}.",
                    False,
                )
        return None

    def _check_equal_share(
        self,
        snapshot: GroupSnapshot,
        quota_id: int,
        members: Sequence[WorkloadUsage],
        answer: Admission,
    ) -> Admission:
        """Rule 6: equal share of the team's borrowing among its active users (code `equal_share`);
        only a request beyond min is checked."""
        state = snapshot.quota(quota_id)
        share = state.spec.equal_share
        if share is None or answer.within_min:
            return answer
        usage = state.side(Side.GPU)
        borrowing, each, most = share.per_user(usage.runtime.gpu_milli, usage.min.gpu_milli)
        wanted: dict[int, int] = {}
        for member in members:
            if member.owner_id is not None and member.resources.gpu_milli:
                wanted[member.owner_id] = (
                    wanted.get(member.owner_id, 0) + member.resources.gpu_milli
                )
        users = max(1, share.active_users)
        for owner_id, request in sorted(wanted.items()):
            held = share.used_by(owner_id)
            admitted = self._admitted_by_user.get((quota_id, owner_id), 0)
            if held + admitted + request > most:
                return Admission(
                    False,
                    AdmissionCode.EQUAL_SHARE.value,
                    f"{state.name} shares its borrowing equally among its {users} active users: "
                    f"{human_amount('gpu_milli', borrowing)} of borrowing ÷ {users} = "
                    f"{human_amount('gpu_milli', each)} each beyond an equal share of min "
                    f"({human_amount('gpu_milli', usage.min.gpu_milli // users)}), so at most "
                    f"{human_amount('gpu_milli', most)} per person; its owner holds "
                    f"{human_number('gpu_milli', held)}"
                    + (
                        f" + {human_number('gpu_milli', admitted)} admitted this cycle"
                        if admitted
                        else ""
                    )
                    + f", request {human_number('gpu_milli', request)}.",
                    False,
                )
        return answer

    def unadmit(self, members: Sequence[WorkloadUsage]) -> None:
        """Give back the tally of admitted `members` (never below zero)."""
        for member in members:
            if member.owner_id is not None:
                user_key = (member.quota_id, member.owner_id)
                left = self._admitted_by_user.get(user_key, 0) - member.resources.gpu_milli
                self._admitted_by_user[user_key] = max(0, left)
            amount = member.resources.only(member.side.dimensions).scaled(-1)
            key = (member.quota_id, member.side)
            self._count(key, amount, nonpreemptible=not member.preemptible)

    def _with_demand(self, members: Sequence[WorkloadUsage], counted: bool | None) -> GroupSnapshot:
        if counted is True:
            return self.snapshot
        known = self.snapshot.pending_ids if counted is None else frozenset()
        missing = [u for u in members if not (u.workload_id and u.workload_id in known)]
        return self.snapshot.with_workloads([replace(u, active=False) for u in missing])

    def _check_after_admitted(
        self,
        snapshot: GroupSnapshot,
        quota_id: int,
        side: Side,
        request: Resources,
        preemptible: bool,
        answer: Admission,
    ) -> Admission:
        """Rules 1, 4 and 3 again with what this session admitted before counted as in use."""
        key = (quota_id, side)
        before = self._admitted.get(key)
        np_before = self._admitted_nonpreemptible.get(key)
        if before is None and (preemptible or np_before is None):
            return answer  # nothing admitted before: check_request already decided
        state = snapshot.quota(quota_id)
        usage = state.side(side)
        label = f"{state.name} {side.label}"
        before = before or Resources()
        refusal = _budget_refusal(
            state.spec.budget, label, side, usage.min, usage.used + before + request
        )
        if refusal is not None:
            return refusal
        limit = usage.runtime.minimum(usage.max)
        over = _first_over(usage.used + before + request, limit, side.dimensions)
        if over is not None:
            return Admission(
                False,
                AdmissionCode.OVER_RUNTIME.value,
                f"{label}: {human_number(over, usage.used.get(over))} in use + "
                f"{human_number(over, before.get(over))} admitted this cycle + request "
                f"{human_number(over, request.get(over))} is more than its runtime share of "
                f"{human_amount(over, limit.get(over))}; waiting for capacity to free up.",
                answer.within_min,
            )
        if not preemptible:
            np_before = np_before or Resources()
            held = usage.nonpreemptible_used + np_before
            if not is_within_min(held + request, usage.min, side.dimensions):
                guaranteed = guaranteed_dimensions(usage.min, side.dimensions) or side.dimensions
                over = _first_over(held + request, usage.min, guaranteed) or guaranteed[0]
                return Admission(
                    False,
                    AdmissionCode.NONPREEMPTIBLE_BEYOND_MIN.value,
                    f"{label}: non-preemptible work may only run within min "
                    f"{human_amount(over, usage.min.get(over))}; "
                    f"{human_number(over, held.get(over))} is held or admitted, request "
                    f"{human_number(over, request.get(over))}.",
                    answer.within_min,
                )
        return answer

    def _count(self, key: tuple[int, Side], amount: Resources, *, nonpreemptible: bool) -> None:
        """Add `amount` (negative to give back) to the session's tally of `key` (never below zero); a
        request with a non-preemptible member counts whole toward the non-preemptible tally."""
        self._admitted[key] = (self._admitted.get(key, Resources()) + amount).clip()
        if nonpreemptible:
            held = self._admitted_nonpreemptible.get(key, Resources())
            self._admitted_nonpreemptible[key] = (held + amount).clip()


def _both(first: Admission, second: Admission) -> Admission:
    """One answer for a request with members on both sides (both allowed)."""
    return Admission(
        True, first.code, f"{first.reason} {second.reason}", first.within_min and second.within_min
    )


def check_admission(workload: Any, snapshot: GroupSnapshot | None = None) -> Admission:
    """May `workload` (a scheduling.models.Workload, saved or not) start now under its quota?

    A sequence of workloads (the members of one gang, same quota) is admitted as one request per side.
    `snapshot` defaults to `group_snapshot(quota.group)`. The answer of a fresh `AdmissionSession`: what
    a cycle decides for this request at the head of its queue. Read-only.
    """
    members: Sequence[Any] = list(workload) if isinstance(workload, list | tuple) else [workload]
    if not members:
        raise ValueError("check_admission: no workload given")
    if snapshot is None:
        snapshot = group_snapshot(members[0].quota.group)
    return AdmissionSession(snapshot).admit([usage_of(member) for member in members])
