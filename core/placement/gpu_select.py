"""GPU choice inside the chosen node (protocol §4.5) and the assignment it produces."""

from __future__ import annotations

import numpy as np

from .state import ClusterState
from .types import GPU_MILLI, Assignment, PlacementRequest, TopologyPolicy


def slice_candidates(state: ClusterState, i: int, request: PlacementRequest) -> np.ndarray:
    """Indices of the healthy GPUs of node ``i`` that can host the slice (compute and memory)."""
    ok = (
        state.gpu_ok[i]
        & (state.gpu_free[i] >= request.gpu_milli)
        & (state.gpu_mem_free[i] >= request.gpu_memory_mib)
    )
    return np.flatnonzero(ok)


def best_slice_gpu(state: ClusterState, i: int, request: PlacementRequest) -> int:
    """``best`` rule: the GPU with the least free milli that still fits, lowest index on ties."""
    cand = slice_candidates(state, i, request)
    free = state.gpu_free[i, cand]
    return int(cand[int(np.argmin(free))])


def whole_gpus(state: ClusterState, i: int, request: PlacementRequest) -> tuple[int, ...]:
    """Completely free GPUs for a whole-GPU request: the lowest indices (protocol), or for a
    ``PREFERRED``/``RESTRICTED`` topology the lowest indices inside the first NVLink group, else the first
    NUMA node, that holds them all (falling back to the lowest indices for ``PREFERRED``)."""
    k = request.gpu_count
    free = (
        state.gpu_ok[i]
        & (state.gpu_free[i] == GPU_MILLI)
        & (state.gpu_mem_free[i] == state.gpu_mem_cap[i])
    )
    idx = np.flatnonzero(free)
    if request.topology is not TopologyPolicy.NONE and k > 1:
        for ids in (state.gpu_nvlink[i], state.gpu_numa[i]):
            for d in sorted(set(ids[idx].tolist())):
                dom = idx[ids[idx] == d]
                if dom.size >= k:
                    return tuple(int(x) for x in dom[:k])
        if request.topology is TopologyPolicy.RESTRICTED:
            raise ValueError(f"{request.request_id}: no topology domain with {k} free GPUs")
    return tuple(int(x) for x in idx[:k])


def make_assignment(
    state: ClusterState, i: int, request: PlacementRequest, gpus: tuple[int, ...]
) -> Assignment:
    """The :class:`Assignment` of ``request`` on node ``i`` and GPUs ``gpus``."""
    r = request
    if r.is_cpu_only:
        return Assignment(r.request_id, state.names[i], (), 0, 0, r.cpu_milli, r.memory_mib)
    if r.is_whole_gpu:
        mem = int(min(int(state.gpu_mem_cap[i, j]) for j in gpus))
        return Assignment(
            r.request_id, state.names[i], gpus, GPU_MILLI, mem, r.cpu_milli, r.memory_mib
        )
    return Assignment(
        r.request_id, state.names[i], gpus, r.gpu_milli, r.gpu_memory_mib, r.cpu_milli, r.memory_mib
    )
