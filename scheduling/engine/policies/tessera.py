"""Tessera's default policy (placeholder: FGD with float scores, refined below)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..fragmentation import after_placement
from ..state import NodeKey
from ..types import TypicalPod
from .fgd import FgdPolicy


class TesseraPolicy(FgdPolicy):
    """Float fragmentation gradient."""

    name = "tessera"

    def score_key(
        self, key: NodeKey, pod: tuple[int, int, int], allowed: frozenset[int] | None
    ) -> tuple[float, tuple[int, ...]]:
        fm = self._frag
        assert fm is not None
        f0 = fm.frag(key)
        c, m, k = pod
        if k == 1 and 0 < m < 1000:
            best = -math.inf
            vals: list[int] = []
            for v in sorted(set(key[2])):
                if v < m or (allowed is not None and v not in allowed):
                    continue
                s = f0 - fm.frag(after_placement(key, pod, v))
                if s > best:
                    best, vals = s, [v]
                elif s == best:
                    vals.append(v)
            return best, tuple(vals)
        return f0 - fm.frag(after_placement(key, pod, None)), ()


def make_tessera(*, typical: Sequence[TypicalPod] = (), seed: int = 0) -> TesseraPolicy:
    """Factory for :class:`TesseraPolicy`."""
    return TesseraPolicy(typical)
