"""GpuPacking (protocol §7): fill partly used GPUs, then idle GPUs of used nodes, then idle nodes.

CPU-only pod: 0 everywhere. Fully idle node: ``max(33 − #GPUs, #GPUs)``. Otherwise take, in ascending idle
order, the first ``k`` GPUs with ``idle ≥ m``: if one of them is fully idle the score is
``max(50 − #fully-idle GPUs used, 33)``, else ``max(100 − (Σ idle·100 div 1000) div 10, 50)``. GPU: ``best``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..state import ClusterState
from ..types import GPU_MILLI, PlacementRequest, TypicalPod
from .base import Choice, IntArray, default_gpus, pick


class GpuPackingPolicy:
    """Packing by GPU occupancy, integer scores."""

    name = "gpupacking"

    def choose(
        self, state: ClusterState, request: PlacementRequest, cand: IntArray, prio: IntArray
    ) -> Choice:
        """Score and pick."""
        r = request
        if r.is_cpu_only:
            i = pick(cand, np.zeros(cand.size, np.int64), prio)
            return i, ()
        ngpu = state.gpu_count[cand]
        idle_node = state.idle_milli[cand] == ngpu * GPU_MILLI
        if r.is_whole_gpu:
            used = np.full(cand.size, np.maximum(50 - r.gpu_count, 33), np.int64)
        else:
            free = np.where(state.gpu_ok[cand], state.gpu_free[cand], -1).astype(np.int64)
            fits = free >= r.gpu_milli
            tight = np.where(fits, free, 1 << 30).min(axis=1)
            used = np.where(
                tight == GPU_MILLI,
                max(50 - 1, 33),
                np.maximum(100 - (tight * 100 // GPU_MILLI) // 10, 50),
            )
        score = np.where(idle_node, np.maximum(33 - ngpu, ngpu), used).astype(np.int64)
        i = pick(cand, score, prio)
        return i, default_gpus(state, i, r)


def make_gpupacking(*, typical: Sequence[TypicalPod] = (), seed: int = 0) -> GpuPackingPolicy:
    """Factory for :class:`GpuPackingPolicy`."""
    return GpuPackingPolicy()
