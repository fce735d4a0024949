"""GpuClustering (protocol §7): keep pods of the same kind together.

CPU-only pod: 0 everywhere. A GPU pod has the tag ``share`` (one GPU, < 1000 milli) or ``<k>-gpu``;
``score = 25 · (8000 − G) div 8000`` plus 75 if the node hosts only GPU pods with the same tag, 50 if it
hosts that tag among others, 25 if it hosts no GPU pod, 0 otherwise. GPU: ``best``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..state import ClusterState, assignment_tag
from ..types import PlacementRequest, TypicalPod
from .base import Choice, IntArray, default_gpus, pick


class GpuClusteringPolicy:
    """Affinity by pod tag."""

    name = "gpuclustering"

    def choose(
        self, state: ClusterState, request: PlacementRequest, cand: IntArray, prio: IntArray
    ) -> Choice:
        """Score and pick."""
        r = request
        if r.is_cpu_only:
            i = pick(cand, np.zeros(cand.size, np.int64), prio)
            return i, ()
        tag = assignment_tag(tuple(range(r.gpu_count)), r.gpu_milli)
        tags = state.tags[cand].astype(np.int64)
        total = tags.sum(axis=1)
        same = tags[:, tag]
        bonus = np.where(total == 0, 25, np.where(same == total, 75, np.where(same > 0, 50, 0)))
        base = 25 * (8000 - state.idle_milli[cand]) // 8000
        i = pick(cand, (base + bonus).astype(np.int64), prio)
        return i, default_gpus(state, i, r)


def make_gpuclustering(*, typical: Sequence[TypicalPod] = (), seed: int = 0) -> GpuClusteringPolicy:
    """Factory for :class:`GpuClusteringPolicy`."""
    return GpuClusteringPolicy()
