"""What-if: would a request start now? Admission plus the engine on the current snapshot, nothing written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.placement import plan_placements
from core.placement.mig import MigRequest, plan_mig
from quotas.admission import check_admission
from quotas.models import Quota, QuotaGroup
from scheduling.choices import WorkloadKind, WorkloadState
from scheduling.models import Workload
from scheduling.services.charge import PoolCards
from scheduling.services.mig_cards import mig_cards
from scheduling.services.snapshot import GroupCluster, snapshot_for_group, workload_request
from scheduling.services.workloads import fit_to_pool, validate_resources


@dataclass(frozen=True)
class Preview:
    """`starts_now`: admitted and a node can host it now; otherwise `code`/`reason` say why."""

    starts_now: bool
    code: str
    reason: str
    node: str | None = None


def preview_request(quota: Quota, *, owner: Any = None, **resources: Any) -> Preview:
    """Would a request with these resources (submit_workload fields: cpu_milli, memory_mib, gpu_count,
    gpu_milli, gpu_memory_mib, gpu_models, node_labels, topology, priority, preemptible) start now in
    `quota`, submitted by `owner`? Admission is the cycle's (quotas.admission), so the quota's per-person
    limit counts what `owner` holds (no owner: that limit is not checked). Raises InvalidInput for
    malformed resources. Read-only."""
    preemptible = bool(resources.pop("preemptible", True))
    res = validate_resources(
        cpu_milli=resources.get("cpu_milli"),
        memory_mib=resources.get("memory_mib"),
        gpu_count=resources.get("gpu_count", 0),
        gpu_milli=resources.get("gpu_milli", 0),
        gpu_memory_mib=resources.get("gpu_memory_mib", 0),
        gpu_models=resources.get("gpu_models", ()),
        node_labels=resources.get("node_labels"),
        topology=resources.get("topology", "none"),
        priority=resources.get("priority", 0),
        profile=resources.get("profile", "development"),
        mig_profile=resources.get("mig_profile", ""),
    )
    res = fit_to_pool(res, PoolCards.of(quota.group), quota.group)
    w = Workload(
        tenant_id=quota.tenant_id,
        quota=quota,
        owner_id=getattr(owner, "pk", None),
        kind=resources.get("kind", WorkloadKind.CODESPACE),
        name="preview",
        state=WorkloadState.PENDING,
        preemptible=preemptible,
        **res,
    )
    verdict = check_admission(w)
    if not verdict.allowed:
        return Preview(False, verdict.code, verdict.reason)
    cluster = snapshot_for_group(quota.group)
    if w.mig_profile:
        return _preview_mig(quota, cluster, w, verdict.reason)
    w.pk = 0
    plan = plan_placements(cluster.state, [workload_request(w)])
    if plan.placements:
        a = plan.placements[0]
        return Preview(
            True, "starts_now", verdict.reason or f"It would start now on {a.node}.", a.node
        )
    u = plan.unplaced[0]
    return Preview(False, u.reason.value, u.message)


def largest_free_slice(group: QuotaGroup) -> tuple[int, int]:
    """The largest (gpu_milli, gpu_memory_mib) free on one healthy GPU of a schedulable node of the group
    ((0, 0) when none)."""
    cluster = snapshot_for_group(group)
    found = cluster.state.largest_free_slice(cluster.state.schedulable & cluster.state.has_gpu)
    return (int(found[0]), int(found[1])) if found else (0, 0)


def _preview_mig(quota: Quota, cluster: GroupCluster, w: Workload, admitted: str) -> Preview:
    """Where a MIG instance would start now: the MIG engine on the pool's cards (with the instances in
    use), only on nodes with room for its CPU and memory."""
    room = tuple(
        sorted(
            name
            for name in cluster.nodes
            if cluster.state.node_free(name)["cpu_milli"] >= w.cpu_milli
            and cluster.state.node_free(name)["memory_mib"] >= w.memory_mib
        )
    )
    cards = mig_cards(quota.group, cluster.nodes)
    plan = plan_mig(cards, [MigRequest("0", w.mig_profile, nodes=room)]) if room else None
    if plan is not None and plan.placements:
        node = plan.placements[0].node
        return Preview(True, "starts_now", admitted or f"It would start now on {node}.", node)
    message = (
        plan.unplaced[0].message
        if plan is not None
        else "No MIG node has room for its CPU and memory."
    )
    return Preview(False, "insufficient_gpu", f"MIG {w.mig_profile}: {message}")
