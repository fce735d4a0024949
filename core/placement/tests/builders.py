"""Builders for engine tests: nodes from short strings, requests with defaults, plan projections."""

from __future__ import annotations

from core.placement import (
    ClusterState,
    GpuSpec,
    NodeSpec,
    PlacementPlan,
    PlacementRequest,
    ReservationPolicy,
)


def node(
    name: str,
    gpus: int = 0,
    *,
    model: str = "A100",
    cpu: int = 32000,
    mem: int = 131072,
    gpu_mem: int = 40960,
    labels: tuple[tuple[str, str], ...] = (),
    schedulable: bool = True,
    unhealthy: tuple[int, ...] = (),
    numa: tuple[int, ...] = (),
    nvlink: tuple[int, ...] = (),
) -> NodeSpec:
    """A node with ``gpus`` identical GPUs (NUMA / NVLink ids per GPU optional)."""
    specs = tuple(
        GpuSpec(
            j,
            model,
            gpu_mem,
            numa_node=numa[j] if numa else 0,
            nvlink_group=nvlink[j] if nvlink else 0,
            healthy=j not in unhealthy,
            uuid=f"{name}-gpu{j}",
        )
        for j in range(gpus)
    )
    return NodeSpec(name, cpu, mem, specs, model if gpus else "", labels, schedulable)


def cluster(*nodes: NodeSpec, reservation: ReservationPolicy | None = None) -> ClusterState:
    """State of an empty cluster."""
    return ClusterState.from_nodes(nodes, reservation or ReservationPolicy())


def req(
    rid: str,
    *,
    cpu: int = 1000,
    mem: int = 1024,
    gpus: int = 0,
    milli: int = 0,
    gpu_mem: int = 0,
    **kw: object,
) -> PlacementRequest:
    """A request; ``gpus=1, milli=250`` is a quarter slice, ``gpus=2, milli=1000`` two whole GPUs."""
    return PlacementRequest(rid, cpu, mem, gpus, milli, gpu_mem, **kw)  # type: ignore[arg-type]


def placed(plan: PlacementPlan) -> dict[str, tuple[str, tuple[int, ...]]]:
    """request id -> (node, GPU indices)."""
    return {a.request_id: (a.node, a.gpu_indices) for a in plan.placements}


def reasons(plan: PlacementPlan) -> dict[str, str]:
    """request id -> unplaced reason value."""
    return {u.request_id: u.reason.value for u in plan.unplaced}
