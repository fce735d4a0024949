"""Feasibility: which nodes can host a request right now (vectorised over nodes).

The filters run in a fixed order; :func:`filter_steps` exposes them one by one so that :mod:`.explain` can
say how many nodes each constraint excluded. :func:`feasible_mask` is their conjunction.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .state import BoolArray, ClusterState
from .types import GPU_MILLI, PlacementRequest, TopologyPolicy, UnplacedReason

Step = tuple[str, UnplacedReason, Callable[[ClusterState, PlacementRequest], BoolArray]]


def validate(request: PlacementRequest) -> str | None:
    """Return a sentence saying why a request is malformed, or ``None`` when it is valid."""
    r = request
    if r.cpu_milli < 0 or r.memory_mib < 0 or r.gpu_memory_mib < 0:
        return "CPU, memory and GPU memory must not be negative"
    if r.gpu_count < 0 or r.gpu_milli < 0:
        return "gpu_count and gpu_milli must not be negative"
    if r.gpu_milli > GPU_MILLI:
        return f"gpu_milli is per GPU and at most {GPU_MILLI}, got {r.gpu_milli}"
    if r.gpu_count > 1 and 0 < r.gpu_milli < GPU_MILLI:
        return (
            "a slice (gpu_milli < 1000) is on exactly one GPU; ask for whole GPUs for gpu_count > 1"
        )
    if r.gpu_count >= 1 and r.gpu_milli == 0:
        return "gpu_count > 0 needs gpu_milli > 0 (1000 for whole GPUs)"
    return None


def model_mask(state: ClusterState, models: tuple[str, ...]) -> BoolArray:
    """Nodes with a GPU whose model is one of ``models`` (empty = any GPU node)."""
    cache: dict[tuple[str, ...], BoolArray] = state.__dict__.setdefault("_model_masks", {})
    m = cache.get(models)
    if m is None:
        if not models:
            m = state.has_gpu.copy()
        else:
            ids = [state.model_index[x] for x in set(models) if x in state.model_index]
            m = np.isin(state.model_id, np.array(ids, np.int16)) & state.has_gpu
        cache[models] = m
    return m


def label_mask(state: ClusterState, labels: tuple[tuple[str, str], ...]) -> BoolArray:
    """Nodes carrying every label in ``labels``."""
    m = np.ones(len(state), np.bool_)
    for kv in labels:
        j = state.label_index.get(kv)
        if j is None:
            return np.zeros(len(state), np.bool_)
        m &= state.labels[:, j]
    return m


def slice_gpu_mask(state: ClusterState, request: PlacementRequest) -> BoolArray:
    """Per-GPU mask (N × G) of healthy GPUs that can host the slice (compute and memory)."""
    return (
        state.gpu_ok
        & (state.gpu_free >= request.gpu_milli)
        & (state.gpu_mem_free >= request.gpu_memory_mib)
    )


def whole_gpu_mask(state: ClusterState) -> BoolArray:
    """Per-GPU mask (N × G) of healthy, completely free GPUs."""
    out: BoolArray = (
        state.gpu_ok & (state.gpu_free == GPU_MILLI) & (state.gpu_mem_free == state.gpu_mem_cap)
    )
    return out


def domain_whole_free(state: ClusterState) -> np.ndarray:
    """Per node, the largest number of completely free GPUs inside one NVLink group or one NUMA node."""
    free = whole_gpu_mask(state)
    best = np.zeros(len(state), np.int64)
    for ids in (state.gpu_nvlink, state.gpu_numa):
        for d in np.unique(ids):
            best = np.maximum(best, (free & (ids == d)).sum(axis=1))
    return best


def _cordon(s: ClusterState, r: PlacementRequest) -> BoolArray:
    return s.schedulable


def _labels(s: ClusterState, r: PlacementRequest) -> BoolArray:
    return label_mask(s, r.node_labels)


def _model(s: ClusterState, r: PlacementRequest) -> BoolArray:
    return model_mask(s, r.gpu_models)


def _cpu(s: ClusterState, r: PlacementRequest) -> BoolArray:
    return s.cpu_free >= r.cpu_milli


def _memory(s: ClusterState, r: PlacementRequest) -> BoolArray:
    return s.mem_free >= r.memory_mib


def _reserved(s: ClusterState, r: PlacementRequest) -> BoolArray:
    return (s.cpuonly_cpu_used + r.cpu_milli <= s.cpuonly_cpu_limit) & (
        s.cpuonly_mem_used + r.memory_mib <= s.cpuonly_mem_limit
    )


def _gpu(s: ClusterState, r: PlacementRequest) -> BoolArray:
    out: BoolArray = (
        s.whole_free >= r.gpu_count if r.is_whole_gpu else s.max_free_milli >= r.gpu_milli
    )
    return out


def _gpu_memory(s: ClusterState, r: PlacementRequest) -> BoolArray:
    out: BoolArray = np.asarray(slice_gpu_mask(s, r).any(axis=1), np.bool_)
    return out


def _topology(s: ClusterState, r: PlacementRequest) -> BoolArray:
    return domain_whole_free(s) >= r.gpu_count


def filter_steps(request: PlacementRequest) -> list[Step]:
    """The filters that apply to ``request``, in order: (constraint name, reason, mask function)."""
    r = request
    steps: list[Step] = [
        ("cordoned", UnplacedReason.CORDONED, _cordon),
    ]
    if r.node_labels:
        steps.append(("node labels", UnplacedReason.NODE_LABELS, _labels))
    if not r.is_cpu_only:
        steps.append(("GPU model", UnplacedReason.NO_GPU_MODEL, _model))
    steps.append(("CPU", UnplacedReason.INSUFFICIENT_CPU, _cpu))
    steps.append(("memory", UnplacedReason.INSUFFICIENT_MEMORY, _memory))
    if r.is_cpu_only:
        steps.append(("reserved for GPU work", UnplacedReason.RESERVED, _reserved))
    else:
        steps.append(("GPU capacity", UnplacedReason.INSUFFICIENT_GPU, _gpu))
        if not r.is_whole_gpu and r.gpu_memory_mib > 0:
            steps.append(("GPU memory", UnplacedReason.GPU_MEMORY, _gpu_memory))
        if r.is_whole_gpu and r.gpu_count > 1 and r.topology is TopologyPolicy.RESTRICTED:
            steps.append(("topology", UnplacedReason.TOPOLOGY, _topology))
    return steps


def admits_mask(state: ClusterState, request: PlacementRequest) -> BoolArray:
    """Nodes whose cordon, labels and GPU models admit ``request``, whatever is free on them (the part
    of :func:`feasible_mask` that releasing work cannot change)."""
    r = request
    m: BoolArray = state.schedulable.copy()
    if r.node_labels:
        m &= label_mask(state, r.node_labels)
    if not r.is_cpu_only:
        m &= model_mask(state, r.gpu_models)
    return m


def feasible_mask(state: ClusterState, request: PlacementRequest) -> BoolArray:
    """Nodes that can host ``request`` now: the conjunction of :func:`filter_steps`.

    Args:
        state: the cluster.
        request: a valid request (see :func:`validate`).

    Returns:
        Boolean mask over nodes.
    """
    r = request
    m = admits_mask(state, r) & (state.cpu_free >= r.cpu_milli) & (state.mem_free >= r.memory_mib)
    if r.is_cpu_only:
        if state.reservation.gpu_node_cpu_fraction or state.reservation.gpu_node_memory_fraction:
            m &= _reserved(state, r)
        return m
    m &= _gpu(state, r)
    if not r.is_whole_gpu and r.gpu_memory_mib > 0:
        m &= _gpu_memory(state, r)
    if r.is_whole_gpu and r.gpu_count > 1 and r.topology is TopologyPolicy.RESTRICTED:
        m &= _topology(state, r)
    return m


def preferred_subset(
    state: ClusterState, request: PlacementRequest, cand: np.ndarray
) -> np.ndarray:
    """Soft preferences applied after filtering, when they leave at least one node.

    CPU-only work goes to nodes without GPUs when one fits; a multi-GPU request with a ``PREFERRED``
    topology goes to nodes that can keep its GPUs in one NVLink group / NUMA node when one can.
    """
    r = request
    if r.is_cpu_only and state.has_gpu.any() and not state.has_gpu.all():
        sub: np.ndarray = cand[~state.has_gpu[cand]]
        if sub.size:
            return sub
    if r.is_whole_gpu and r.gpu_count > 1 and r.topology is TopologyPolicy.PREFERRED:
        sub2: np.ndarray = cand[domain_whole_free(state)[cand] >= r.gpu_count]
        if sub2.size:
            return sub2
    return cand


def fit_counts(state: ClusterState, request: PlacementRequest) -> dict[str, int]:
    """How many more copies of ``request`` fit right now, per node (nodes with 0 left out).

    Counts each node independently (CPU, memory, reservation, GPU compute and memory, whole GPUs,
    model, labels, cordon). The cluster total is ``sum(result.values())``.
    """
    mask = feasible_mask(state, request)
    r = request
    big = np.int64(1 << 40)
    cnt = np.where(r.cpu_milli > 0, state.cpu_free // max(r.cpu_milli, 1), big)
    cnt = np.minimum(cnt, np.where(r.memory_mib > 0, state.mem_free // max(r.memory_mib, 1), big))
    if r.is_cpu_only:
        room_c = (state.cpuonly_cpu_limit - state.cpuonly_cpu_used) // max(r.cpu_milli, 1)
        room_m = (state.cpuonly_mem_limit - state.cpuonly_mem_used) // max(r.memory_mib, 1)
        cnt = np.minimum(cnt, np.where(r.cpu_milli > 0, room_c, big))
        cnt = np.minimum(cnt, np.where(r.memory_mib > 0, room_m, big))
    elif r.is_whole_gpu:
        cnt = np.minimum(cnt, state.whole_free // r.gpu_count)
    else:
        per = state.gpu_free // r.gpu_milli
        if r.gpu_memory_mib > 0:
            per = np.minimum(per, state.gpu_mem_free // r.gpu_memory_mib)
        cnt = np.minimum(cnt, np.where(state.gpu_ok, per, 0).sum(axis=1))
    cnt = np.where(mask, cnt, 0)
    return {state.names[i]: int(cnt[i]) for i in np.flatnonzero(cnt)}
