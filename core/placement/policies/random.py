"""Random: a feasible node chosen uniformly (seeded numpy Generator); a slice on a uniformly random GPU
that fits, whole GPUs on the lowest-index free GPUs. Score: 100 for the drawn node, 0 elsewhere."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..gpu_select import slice_candidates
from ..state import ClusterState
from ..types import PlacementRequest, TypicalPod
from .base import Choice, IntArray, default_gpus


class RandomPolicy:
    """Uniform random placement (not bit-reproducible against the original, compare statistically)."""

    name = "random"

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def choose(
        self, state: ClusterState, request: PlacementRequest, cand: IntArray, prio: IntArray
    ) -> Choice:
        """Draw a node and a GPU."""
        i = int(cand[int(self.rng.integers(cand.size))])
        if request.is_cpu_only or request.is_whole_gpu:
            return i, default_gpus(state, i, request)
        gpus = slice_candidates(state, i, request)
        return i, (int(gpus[int(self.rng.integers(gpus.size))]),)


def make_random(*, typical: Sequence[TypicalPod] = (), seed: int = 0) -> RandomPolicy:
    """Factory for :class:`RandomPolicy`."""
    return RandomPolicy(seed)
