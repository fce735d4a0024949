"""FGD, Fragmentation Gradient Descent (Weng et al., USENIX ATC'23), as in the protocol §6.

Score of node ``n`` for pod ``P``: ``int(100 · sigmoid((F(n) − F(n')) / 1000))`` (truncated), where ``F`` is
the expected fragmentation of :mod:`..fragmentation` against the typical pods and ``n'`` the node after the
placement. A slice is tried on every GPU that fits and the node scores its best GPU (the GPU chosen is the
lowest index reaching that score); other pods take the lowest-index free GPUs. Highest score wins, ties go
to the lowest node priority.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..fragmentation import FragModel, after_placement
from ..state import ClusterState, NodeKey
from ..types import PlacementRequest, TypicalPod
from .base import CachedNodeScorer, Choice, IntArray


def fgd_score(delta: float, scale: float = 1000.0) -> int:
    """``int64(sigmoid(delta / scale) * 100)`` exactly as the simulator computes it (scale 1000)."""
    return int((1.0 / (1.0 + math.exp(-(delta / scale)))) * 100.0)


class FgdPolicy(CachedNodeScorer):
    """FGD with integer, truncated scores (protocol-faithful)."""

    name = "fgd"

    def __init__(self, typical: Sequence[TypicalPod]) -> None:
        super().__init__()
        self.typical = tuple(typical)
        self.scale = 1000.0
        self._frag: FragModel | None = None
        self._models: dict[str, int] | None = None

    def bind_models(self, model_index: dict[str, int]) -> FragModel:
        """The fragmentation model for a state's model ids (rebuilt if the ids change)."""
        if self._frag is None or self._models != model_index:
            self._models = dict(model_index)
            self._frag = FragModel(self.typical, model_index)
            self._memo.clear()
        return self._frag

    def choose(
        self, state: ClusterState, request: PlacementRequest, cand: IntArray, prio: IntArray
    ) -> Choice:
        """See :meth:`CachedNodeScorer.choose`."""
        self.bind_models(state.model_index)
        return super().choose(state, request, cand, prio)

    def score_key(
        self, key: NodeKey, pod: tuple[int, int, int], allowed: frozenset[int] | None
    ) -> tuple[float, tuple[int, ...]]:
        """FGD score of a node state; for a slice also the GPU values reaching it."""
        fm = self._frag
        assert fm is not None
        f0 = fm.frag(key)
        c, m, k = pod
        if k == 1 and 0 < m < 1000:
            best = -1
            vals: list[int] = []
            for v in sorted(set(key[2])):
                if v < m or (allowed is not None and v not in allowed):
                    continue
                s = fgd_score(f0 - fm.frag(after_placement(key, pod, v)), self.scale)
                if s > best:
                    best, vals = s, [v]
                elif s == best:
                    vals.append(v)
            return float(best), tuple(vals)
        return float(fgd_score(f0 - fm.frag(after_placement(key, pod, None)), self.scale)), ()


def make_fgd(*, typical: Sequence[TypicalPod] = (), seed: int = 0) -> FgdPolicy:
    """Factory for :class:`FgdPolicy` (``seed`` is unused: FGD is deterministic)."""
    return FgdPolicy(typical)
