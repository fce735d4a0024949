"""Reads of the scheduling side a codespace's observed phase needs (`codespaces.phase.observe`): its
workload's facts and its active placement (node, GPU names, model), one query for any number of
codespaces so that lists stay one query per page."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from codespaces.phase import PlacementFacts, WorkloadFacts
from scheduling.models import Placement


def workload_facts(workload: Any) -> WorkloadFacts | None:
    """The facts `observe` reads of a scheduling Workload (None stays None)."""
    if workload is None:
        return None
    return WorkloadFacts(
        state=workload.state,
        pending_reason=workload.pending_reason,
        pending_code=workload.pending_code,
        queue_position=workload.queue_position,
        failure_reason=workload.failure_reason,
    )


def active_placements(workload_ids: Iterable[int | None]) -> dict[int, PlacementFacts]:
    """{workload id: its active placement} for those of `workload_ids` that hold one, in one query
    (GPU names in GPU index order; a CPU-only placement has a node and no GPU)."""
    ids = sorted({i for i in workload_ids if i is not None})
    if not ids:
        return {}
    rows = (
        Placement.objects.filter(workload_id__in=ids, released_at__isnull=True)
        .order_by("workload_id", "gpu_shares__gpu__index")
        .values_list(
            "workload_id", "node__name", "gpu_shares__gpu__index", "gpu_shares__gpu__model"
        )
    )
    nodes: dict[int, str] = {}
    gpus: dict[int, list[tuple[int, str]]] = {}
    for workload_id, node_name, gpu_index, gpu_model in rows:
        nodes[workload_id] = node_name
        if gpu_index is not None:
            gpus.setdefault(workload_id, []).append((gpu_index, gpu_model))
    return {
        workload_id: PlacementFacts(
            node_name=node_name,
            gpu_names=", ".join(f"gpu{index}" for index, _ in gpus.get(workload_id, [])),
            gpu_model=gpus[workload_id][0][1] if gpus.get(workload_id) else "",
        )
        for workload_id, node_name in nodes.items()
    }
