"""Admission: may a quota start this request now? If not, a reason with numbers the user sees.

Koordinator's PreFilter (k8s-integration.md §3.3) on the workload's side of its quota, in this order:
1. `used + request ≤ max` in every dimension (code `quota_max`);
2. the request fits the side's capacity of the group at all (code `exceeds_capacity`);
3. non-preemptible work: `non-preemptible used + request ≤ min` in every dimension the quota guarantees
   (min > 0; a side with no min admits no non-preemptible work) (code `nonpreemptible_beyond_min`);
4. `used + request ≤ runtime`, the runtime share computed with the request counted in the demand (code
   `quota_runtime`).
`within_min` tells the caller whether the request runs within the guaranteed min (then it may reclaim
borrowed capacity from siblings; see quotas.reclaim).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from quotas.resources import Resources, Side, human_amount, human_number, total
from quotas.usage import GroupSnapshot, WorkloadUsage, group_snapshot, usage_of


class AdmissionCode(str, Enum):
    ADMITTED = "admitted"
    OVER_MAX = "quota_max"
    EXCEEDS_CAPACITY = "exceeds_capacity"
    NONPREEMPTIBLE_BEYOND_MIN = "nonpreemptible_beyond_min"
    OVER_RUNTIME = "quota_runtime"


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


def check_admission(workload: Any, snapshot: GroupSnapshot | None = None) -> Admission:
    """May `workload` (a scheduling.models.Workload, saved or not) start now under its quota?

    A sequence of workloads (the members of one gang, same quota) is admitted as one request per side.
    `snapshot` defaults to `group_snapshot(quota.group)`; pass one to check many workloads of a cycle
    against the same reading. Read-only.
    """
    members: Sequence[Any] = list(workload) if isinstance(workload, list | tuple) else [workload]
    if not members:
        raise ValueError("check_admission: no workload given")
    first = members[0]
    if snapshot is None:
        snapshot = group_snapshot(first.quota.group)
    usages = [usage_of(member) for member in members]
    counted = snapshot.pending_ids
    # Members already part of the snapshot's pending demand are counted once; the rest are added.
    missing = [u for u in usages if not (u.workload_id and u.workload_id in counted)]
    if missing:
        snapshot = snapshot.with_workloads([_as_pending(u) for u in missing])
    result: Admission | None = None
    for side in (Side.GPU, Side.CPU):
        on_side = [u for u in usages if u.side is side]
        if not on_side:
            continue
        answer = check_request(
            snapshot,
            first.quota_id,
            side,
            total(u.resources for u in on_side),
            preemptible=all(u.preemptible for u in on_side),
            already_counted=True,
        )
        if not answer.allowed:
            return answer
        if result is None:
            result = answer
        else:
            result = Admission(
                True,
                result.code,
                f"{result.reason} {answer.reason}",
                result.within_min and answer.within_min,
            )
    assert result is not None
    return result


def _as_pending(usage: WorkloadUsage) -> WorkloadUsage:
    return replace(usage, active=False)
