"""How the scheduling cycle asks the quota tree (quotas.usage / quotas.admission / quotas.reclaim).

One reading of the group (`group_snapshot`) per cycle; each candidate is checked with `check_admission`
against it, and what the cycle already admitted is tallied here per quota and side, so a burst of 500
submissions cannot all squeeze into one runtime share (recomputing the snapshot after each would be
quadratic). Reclaim is delegated to `quotas.reclaim.plan_reclaim` when that module is present.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, F, Max, Q, Sum

from quotas.admission import (
    check_admission,
    check_request,
    guaranteed_dimensions,
    is_within_min,
)
from quotas.models import QuotaGroup
from quotas.reclaim import plan_reclaim
from quotas.resources import Resources, Side, human_amount, human_number, total
from quotas.usage import (
    GroupSnapshot,
    QuotaSpec,
    WorkloadUsage,
    build_snapshot,
    charged_gpu_memory_expression,
    group_capacity,
    group_snapshot,
    usage_of,
    workload_side,
)
from scheduling.choices import ACTIVE_STATES, WorkloadState
from scheduling.models import Gpu, Node, Workload

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    code: str
    reason: str
    within_min: bool = False


@dataclass
class Admitter:
    """Admits the candidates of one cycle in order against one snapshot plus a running tally."""

    group: Any
    snapshot: Any = None
    tally: dict[tuple[int, str], Any] = field(default_factory=dict)
    np_tally: dict[tuple[int, str], Any] = field(default_factory=dict)

    @classmethod
    def for_group(cls, group: Any) -> Admitter:
        return cls(group=group, snapshot=cycle_snapshot(group))

    def share_ratio(self, quota_id: int, uses_gpu: bool) -> float:
        """How far a quota is along its runtime share (used / runtime) on the side a workload uses:
        lower = further below its share = served first (fair share)."""
        if self.snapshot is None or quota_id not in self.snapshot.quotas:
            return 0.0
        side = self.snapshot.quota(quota_id).side(Side.GPU if uses_gpu else Side.CPU)
        dim = "gpu_milli" if uses_gpu else "cpu_milli"
        runtime = side.runtime.get(dim)
        used = side.used.get(dim)
        if runtime <= 0:
            return float("inf") if used or side.demand.get(dim) else 0.0
        return used / runtime

    def admit(self, members: Sequence[Any]) -> Verdict:
        """Admit one workload, or a gang's members together (same quota)."""
        if self.snapshot is None:
            return Verdict(True, "admitted", "", True)
        first = members[0]
        if first.quota_id not in self.snapshot.quotas:
            return Verdict(
                False, "no_quota", f"Quota {first.quota_id} is not in group {self.group}."
            )
        answer = self._check(members)
        if not answer.allowed:
            return Verdict(False, answer.code, answer.reason, answer.within_min)
        # What this cycle admitted before must fit as well.
        usage = self.snapshot.quota(first.quota_id)
        for side in (Side.GPU, Side.CPU):
            on_side = [m for m in members if workload_side(m) is side]
            if not on_side:
                continue
            request = total(usage_of(m).resources for m in on_side).only(side.dimensions)
            key = (first.quota_id, side.value)
            before = self.tally.get(key, Resources())
            s = usage.side(side)
            limit = s.runtime.minimum(s.max)
            after = s.used + before + request
            for dim in side.dimensions:
                if after.get(dim) > limit.get(dim):
                    return Verdict(
                        False,
                        "quota_runtime",
                        f"{usage.name} {side.label}: {human_number(dim, s.used.get(dim))} in use + "
                        f"{human_number(dim, before.get(dim))} admitted this cycle + request "
                        f"{human_number(dim, request.get(dim))} is more than its runtime share of "
                        f"{human_amount(dim, limit.get(dim))}; waiting for capacity to free up.",
                        answer.within_min,
                    )
            if not all(m.preemptible for m in on_side):
                np_before = self.np_tally.get(key, Resources())
                np_after = s.nonpreemptible_used + np_before + request
                # the quotas app's rule: only dimensions the quota guarantees (min > 0) bound it
                if not is_within_min(np_after, s.min, side.dimensions):
                    guaranteed = guaranteed_dimensions(s.min, side.dimensions) or side.dimensions
                    dim = next(
                        (d for d in guaranteed if np_after.get(d) > s.min.get(d)), guaranteed[0]
                    )
                    return Verdict(
                        False,
                        "nonpreemptible_beyond_min",
                        f"{usage.name} {side.label}: non-preemptible work may only run within min "
                        f"{human_amount(dim, s.min.get(dim))}; "
                        f"{human_number(dim, (s.nonpreemptible_used + np_before).get(dim))} is "
                        f"held or admitted, request {human_number(dim, request.get(dim))}.",
                        answer.within_min,
                    )
        for side in (Side.GPU, Side.CPU):
            on_side = [m for m in members if workload_side(m) is side]
            if on_side:
                key = (first.quota_id, side.value)
                request = total(usage_of(m).resources for m in on_side).only(side.dimensions)
                self.tally[key] = self.tally.get(key, Resources()) + request
                if not all(m.preemptible for m in on_side):
                    self.np_tally[key] = self.np_tally.get(key, Resources()) + request
        return Verdict(True, answer.code, answer.reason, answer.within_min)

    def _check(self, members: Sequence[Any]) -> Any:
        """quotas.admission.check_admission for members that are PENDING rows of this snapshot (already in
        its demand): the per-side `check_request`, without rebuilding the set of counted ids per call
        (which made a cycle of n candidates O(n²))."""
        if any(not m.pk or m.state != "pending" for m in members):
            return check_admission(list(members), self.snapshot)
        usages = [usage_of(m) for m in members]
        result = None
        for side in (Side.GPU, Side.CPU):
            on_side = [u for u in usages if u.side is side]
            if not on_side:
                continue
            answer = check_request(
                self.snapshot,
                members[0].quota_id,
                side,
                total(u.resources for u in on_side),
                preemptible=all(u.preemptible for u in on_side),
                already_counted=True,
            )
            if not answer.allowed:
                return answer
            result = answer if result is None else result
        return result

    def unadmit(self, members: Sequence[Any]) -> None:
        """Give back the tally of admitted members the engine could not place."""
        if self.snapshot is None:
            return
        for m in members:
            side = workload_side(m)
            key = (m.quota_id, side.value)
            res = usage_of(m).resources.only(side.dimensions)
            if key in self.tally:
                self.tally[key] = (self.tally[key] - res).clip()
            if not m.preemptible and key in self.np_tally:
                self.np_tally[key] = (self.np_tally[key] - res).clip()


_capacity_cache: dict[int, tuple[Any, Any]] = {}


def _inventory_fingerprint(group: Any) -> tuple[Any, ...]:
    """Cheap summary of what the group's capacity depends on (nodes, their state, unhealthy GPUs)."""
    nodes = Node.objects.aggregate(
        n=Count("pk"),
        last=Max("updated_at"),
        off=Count("pk", filter=Q(cordoned=True) | Q(healthy=False)),
    )
    off_nodes = tuple(
        Node.objects.filter(Q(cordoned=True) | Q(healthy=False))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    bad_gpus = tuple(Gpu.objects.filter(healthy=False).order_by("pk").values_list("pk", flat=True))
    return (
        nodes["n"],
        nodes["last"],
        off_nodes,
        bad_gpus,
        Gpu.objects.count(),
        # every group's selector: a node an older group also matches is counted there, not here
        tuple(
            (pk, json.dumps(selector or {}, sort_keys=True))
            for pk, selector in QuotaGroup.objects.order_by("pk").values_list("pk", "node_selector")
        ),
    )


def warm_capacity(group: Any) -> None:
    """Read the group's capacity into the worker's cache now (an idle cycle does it, so the first busy
    cycle after a start or an inventory change does not pay seconds for it on a large cluster)."""
    key = _inventory_fingerprint(group)
    hit = _capacity_cache.get(group.pk)
    if hit is None or hit[0] != key:
        _capacity_cache[group.pk] = (key, group_capacity(group))


def cycle_snapshot(group: Any) -> Any:
    """quotas.usage.group_snapshot for a cycle, with the group's capacity cached per worker while the
    inventory it depends on is unchanged (reading every node and GPU each cycle costs seconds on a
    5,000-node cluster), and without the per-quota headroom the cycle does not read."""
    key = _inventory_fingerprint(group)
    hit = _capacity_cache.get(group.pk)
    if hit is None or hit[0] != key:
        hit = (key, group_capacity(group))
        _capacity_cache[group.pk] = hit
    specs = [QuotaSpec.of(q) for q in group.quotas.select_related("tenant").order_by("name")]
    return build_snapshot(
        group_id=int(group.pk),
        group_name=group.name,
        allow_overcommitted_min=group.allow_overcommitted_min,
        capacity=hit[1],
        specs=specs,
        workloads=aggregated_usage(group),
        headroom=False,
    )


def aggregated_usage(group: Any) -> list[Any]:
    """The group's live workloads summed per (quota, side, active, preemptible): the same used, pending,
    demand and non-preemptible figures as one row per workload, read with one GROUP BY instead of
    thousands of model instances. Reclaim, which needs the individual units, reads a full snapshot."""
    rows = (
        Workload.objects.filter(
            quota__group=group, state__in=[WorkloadState.PENDING, *ACTIVE_STATES]
        )
        .annotate(
            gm=F("gpu_count") * F("gpu_milli"),
            gmem=F("gpu_count") * charged_gpu_memory_expression(),
        )
        .values("quota_id", "state", "preemptible", "gpu_count")
        .annotate(
            s_gm=Sum("gm"),
            s_gmem=Sum("gmem"),
            s_cpu=Sum("cpu_milli"),
            s_mem=Sum("memory_mib"),
        )
        .order_by()
    )
    sums: dict[tuple[int, Side, bool, bool], Resources] = {}
    for r in rows:
        side = Side.GPU if r["gpu_count"] else Side.CPU
        key = (r["quota_id"], side, r["state"] in ACTIVE_STATES, bool(r["preemptible"]))
        res = Resources(
            gpu_milli=int(r["s_gm"] or 0) if side is Side.GPU else 0,
            gpu_memory_mib=int(r["s_gmem"] or 0) if side is Side.GPU else 0,
            cpu_milli=int(r["s_cpu"] or 0),
            memory_mib=int(r["s_mem"] or 0),
        )
        sums[key] = sums.get(key, Resources()) + res
    return [
        WorkloadUsage(
            workload_id=-(i + 1),
            name="(aggregate)",
            kind="aggregate",
            quota_id=quota_id,
            side=side,
            resources=res,
            active=active,
            preemptible=preemptible,
        )
        for i, ((quota_id, side, active, preemptible), res) in enumerate(
            sorted(sums.items(), key=str)
        )
    ]


def preview_admission(workload: Any) -> Verdict:
    """Admission of one unsaved workload against a fresh reading of its group."""
    answer = check_admission(workload)
    return Verdict(answer.allowed, answer.code, answer.reason, answer.within_min)


def plan_reclaim_for(group: Any, snapshot: Any, candidates: Any) -> Any:
    """quotas.reclaim.plan_reclaim for candidates admitted but without capacity (on a full snapshot of
    the group: reclaim needs the individual workloads), or None."""
    if snapshot is None or not candidates:
        return None
    return plan_reclaim(group_snapshot(group, headroom=False), candidates)


def snapshot_type() -> Any:
    return GroupSnapshot
