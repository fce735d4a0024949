"""DotProd (protocol §7, ``merge``/``max``): the smallest dot product wins.

Node vector ``[cpuLeft/128000, G/8000]``, pod vector ``[c/128000, k·m/8000]``;
``score = int(100 · (1 − node·pod / 2))``. GPU: ``best``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..state import ClusterState
from ..types import PlacementRequest, TypicalPod
from .base import MAX_SPEC_CPU, MAX_SPEC_GPU, Choice, IntArray, default_gpus, pick, pod_key


class DotProductPolicy:
    """Prefer nodes whose leftover is small in the dimensions the pod asks for."""

    name = "dotproduct"

    def choose(
        self, state: ClusterState, request: PlacementRequest, cand: IntArray, prio: IntArray
    ) -> Choice:
        """Score and pick."""
        c, m, k = pod_key(request)
        dot = (state.cpu_free[cand] / MAX_SPEC_CPU) * (c / MAX_SPEC_CPU) + (
            state.idle_milli[cand] / MAX_SPEC_GPU
        ) * (k * m / MAX_SPEC_GPU)
        score = ((1.0 - dot / 2.0) * 100.0).astype(np.int64)
        i = pick(cand, score, prio)
        return i, default_gpus(state, i, request)


def make_dotproduct(*, typical: Sequence[TypicalPod] = (), seed: int = 0) -> DotProductPolicy:
    """Factory for :class:`DotProductPolicy`."""
    return DotProductPolicy()
