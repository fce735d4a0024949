"""BestFit (protocol §7): least leftover wins.

``raw = int(100 · (1 − (0.5 · (cpuLeft − c) / 128000 + 0.5 · (G − k·m) / 8000)))`` where ``cpuLeft`` is the
node's free CPU milli, ``G`` its idle GPU milli and ``(c, m, k)`` the pod's CPU, milli per GPU and GPU count;
then min-max normalised over the feasible nodes with integer arithmetic ``(raw − lo) · 100 div (hi − lo)``
(all equal → 0). GPU: ``best``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..state import ClusterState
from ..types import PlacementRequest, TypicalPod
from .base import MAX_SPEC_CPU, MAX_SPEC_GPU, Choice, IntArray, default_gpus, pick, pod_key


def normalize(raw: IntArray) -> IntArray:
    """The simulator's integer min-max normalisation to 0..100 (all equal -> 0)."""
    lo, hi = int(raw.min()), int(raw.max())
    if hi == lo:
        return np.zeros_like(raw)
    return (raw - lo) * 100 // (hi - lo)


class BestFitPolicy:
    """Least CPU + GPU leftover after placement."""

    name = "bestfit"

    def choose(
        self, state: ClusterState, request: PlacementRequest, cand: IntArray, prio: IntArray
    ) -> Choice:
        """Score, normalise, pick."""
        c, m, k = pod_key(request)
        cpu_left = (state.cpu_free[cand] - c).astype(np.float64)
        gpu_left = (state.idle_milli[cand] - k * m).astype(np.float64)
        share = 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU
        raw = ((1.0 - share) * 100.0).astype(np.int64)
        i = pick(cand, normalize(raw), prio)
        return i, default_gpus(state, i, request)


def make_bestfit(*, typical: Sequence[TypicalPod] = (), seed: int = 0) -> BestFitPolicy:
    """Factory for :class:`BestFitPolicy`."""
    return BestFitPolicy()
