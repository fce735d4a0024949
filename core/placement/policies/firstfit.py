"""FirstFit in the protocol's node order (§12): the feasible node with the lowest priority value.

Score: none (equivalently the same score everywhere, so the tie-break decides). GPU: the ``best`` rule
(a slice on the tightest GPU that fits, whole GPUs on the lowest-index free GPUs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..state import ClusterState
from ..types import PlacementRequest, TypicalPod
from .base import Choice, IntArray, default_gpus


class FirstFitPolicy:
    """Take the first feasible node in priority order."""

    name = "firstfit"

    def choose(
        self, state: ClusterState, request: PlacementRequest, cand: IntArray, prio: IntArray
    ) -> Choice:
        """The feasible node with the lowest priority value."""
        i = int(cand[int(np.argmin(prio[cand]))])
        return i, default_gpus(state, i, request)


def make_firstfit(*, typical: Sequence[TypicalPod] = (), seed: int = 0) -> FirstFitPolicy:
    """Factory for :class:`FirstFitPolicy`."""
    return FirstFitPolicy()
