"""FGD, Fragmentation Gradient Descent (Weng et al., USENIX ATC'23), as in the protocol §6.

Score of node ``n`` for pod ``P``: ``int(100 · sigmoid((F(n) − F(n')) / 1000))`` (truncated), where ``F`` is
the expected fragmentation of :mod:`..fragmentation` against the typical pods and ``n'`` the node after the
placement. A slice is tried on every GPU that fits and the node scores its best GPU (the GPU chosen is the
lowest index reaching that score); other pods take the lowest-index free GPUs. Highest score wins, ties go
to the lowest node priority.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ..fragmentation import EXACT_MARGIN, FragModel, after_placement
from ..state import BoolArray, ClusterState, NodeKey
from ..types import GPU_MILLI, PlacementRequest, TypicalPod
from .base import CachedNodeScorer, Choice, FloatArray, IntArray

#: Node states for :meth:`FgdPolicy.total_frag_rows`: model id, free CPU, idle GPU milli, and per distinct
#: typical milli the GPUs with at least that milli and the free milli of the others.
AfterRows = tuple[IntArray, IntArray, IntArray, IntArray, IntArray]

#: Above this many nodes to score, :meth:`FgdPolicy.score_nodes` first keeps one node per row class.
DEDUPLICATE_ABOVE = 32
#: Up to this many nodes to score, :meth:`FgdPolicy.score_nodes` goes node by node through the memo of
#: (node state, request shape) scores rather than through the vectorised pass: over a fill most decisions
#: find a handful of stale nodes (median 9 on 5,000 × 8), whose states recur, and there the vectorised
#: pass's fixed cost (~80 numpy calls) outweighs memo lookups. Both give the same scores bit for bit. Past
#: 30 % of a fill most stale nodes miss the memo (their exact free CPU is new), and there 32 rather than
#: 64 takes 1-5 % fewer instructions per window (0-10 %: +1 %).
MEMO_SCORING_UP_TO = 32


def fgd_score(delta: float, scale: float = 1000.0) -> int:
    """``int64(sigmoid(delta / scale) * 100)`` exactly as the simulator computes it (scale 1000)."""
    return int((1.0 / (1.0 + math.exp(-(delta / scale)))) * 100.0)


def fgd_scores(
    delta: FloatArray, scale: float = 1000.0, exact: Callable[[int], float] | None = None
) -> IntArray:
    """:func:`fgd_score` of many deltas, exactly.

    ``delta`` may be off from the scalar computation in its last bits (vectorised sums, numpy's ``exp``);
    that only matters where ``100 · sigmoid`` lies within :data:`.EXACT_MARGIN` of an integer, and those
    few are recomputed with :func:`fgd_score` on ``exact(j)`` (the scalar delta of entry ``j``; default:
    ``delta[j]`` itself).
    """
    # The same float operations as :func:`fgd_score`, in place: ``x / -s`` is ``-(x / s)`` exactly (IEEE
    # division rounds symmetrically), and ``1 / (1 + e) * 100`` keeps its order.
    raw = np.exp(delta / -scale)
    raw += 1.0
    np.divide(1.0, raw, out=raw)
    raw *= 100.0
    out: IntArray = raw.astype(np.int64)
    near = np.flatnonzero(np.abs(raw - np.round(raw)) < EXACT_MARGIN)
    for j in near.tolist():
        d = float(delta[j]) if exact is None else exact(j)
        out[j] = fgd_score(d, scale)
    return out


class FgdPolicy(CachedNodeScorer):
    """FGD with integer, truncated scores (protocol-faithful)."""

    name = "fgd"
    #: :meth:`score_nodes` is vectorised over nodes (the placer then skips its one-node-per-class sort).
    batch_scoring = True
    #: See :data:`MEMO_SCORING_UP_TO` (an attribute, so a bench or a test can take either path).
    memo_scoring_up_to = MEMO_SCORING_UP_TO

    def __init__(self, typical: Sequence[TypicalPod]) -> None:
        super().__init__()
        self.typical = tuple(typical)
        self.scale = 1000.0
        self._frag: FragModel | None = None
        self._models: dict[str, int] | None = None
        self._base_uid = -1
        self._base_vals: FloatArray = np.zeros(0, np.float64)
        self._base_vers: IntArray = np.zeros(0, np.int64)

    def cache_nbytes(self) -> int:
        """:meth:`CachedNodeScorer.cache_nbytes` plus the fragmentation memo."""
        frag = self._frag._memo.nbytes() if self._frag is not None else 0
        base = self._base_vals.nbytes + self._base_vers.nbytes
        return super().cache_nbytes() + frag + base

    def bind_models(self, model_index: dict[str, int]) -> FragModel:
        """The fragmentation model for a state's model ids (rebuilt if the ids change)."""
        if self._frag is None or self._models != model_index:
            self._models = dict(model_index)
            self._frag = FragModel(self.typical, model_index)
            self._memo.clear()
            self._base_uid = -1
        return self._frag

    def choose(
        self,
        state: ClusterState,
        request: PlacementRequest,
        cand: IntArray,
        prio: IntArray,
        *,
        mask: BoolArray | None = None,
    ) -> Choice:
        """See :meth:`CachedNodeScorer.choose`."""
        self.bind_models(state.model_index)
        return super().choose(state, request, cand, prio, mask=mask)

    def score_key(
        self, key: NodeKey, pod: tuple[int, int, int], allowed: frozenset[int] | None
    ) -> tuple[float, tuple[int, ...]]:
        """FGD score of a node state; for a slice also the GPU values reaching it."""
        fm = self._frag
        assert fm is not None
        f0 = fm.frag(key)
        c, m, k = pod
        if k == 1 and 0 < m < GPU_MILLI:
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

    # ------------------------------------------------------------------ vectorised scoring
    def total_frag_rows(
        self,
        model: IntArray,
        cpu: IntArray,
        total: IntArray,
        count_ge: IntArray,
        sum_lt: IntArray,
    ) -> FloatArray:
        """The fragmentation the score takes the gradient of, for ``R`` node states at once (FGD: ``F``)."""
        fm = self._frag
        assert fm is not None
        return fm.frag_rows(model, cpu, total, count_ge, sum_lt)

    def _base_frag(
        self,
        state: ClusterState,
        nodes: IntArray,
        rows: IntArray,
        model: IntArray,
        cpu: IntArray,
        total: IntArray,
        stats: tuple[IntArray, IntArray] | None,
        after: AfterRows,
    ) -> tuple[FloatArray, FloatArray]:
        """The fragmentation of ``nodes`` as they are, kept per node version (it does not depend on the
        request, so each node state is evaluated once, not once per request shape), and that of the
        states ``after`` the placement (``model, cpu, total, count_ge, sum_lt`` of :meth:`total_frag_rows`).
        ``stats``: the rows' :meth:`.FragModel.row_stats` when the caller has them (else computed for the
        stale rows only).

        The stale rows and the ``after`` rows go through :meth:`total_frag_rows` as one batch: one call's
        fixed cost instead of two (row-wise, so at most the last bits move, which :func:`fgd_scores`
        absorbs exactly as it does for every vectorised value)."""
        n = len(state)
        if self._base_uid != state.uid or self._base_vals.size != n:
            self._base_uid = state.uid
            self._base_vals = np.zeros(n, np.float64)
            self._base_vers = np.full(n, -1, np.int64)
        version = state.version[nodes]
        miss = np.flatnonzero(self._base_vers[nodes] != version)
        if miss.size:
            fm = self._frag
            assert fm is not None
            count_ge, sum_lt = (
                fm.row_stats(rows[miss]) if stats is None else (stats[0][miss], stats[1][miss])
            )
            both = self.total_frag_rows(
                np.concatenate((model[miss], after[0])),
                np.concatenate((cpu[miss], after[1])),
                np.concatenate((total[miss], after[2])),
                np.concatenate((count_ge, after[3])),
                np.concatenate((sum_lt, after[4])),
            )
            at = nodes[miss]
            self._base_vals[at] = both[: miss.size]
            self._base_vers[at] = version[miss]
            after_frag: FloatArray = both[miss.size :]
        else:
            after_frag = self.total_frag_rows(*after)
        out: FloatArray = self._base_vals[nodes]
        return out, after_frag

    def exact_delta(
        self, state: ClusterState, i: int, pk: tuple[int, int, int], value: int | None
    ) -> float:
        """The scalar gradient of node ``i`` (as :meth:`score_key` computes it) for a pod, a slice going on
        a GPU of free milli ``value``."""
        fm = self._frag
        assert fm is not None
        key = state.node_key(i)
        return fm.frag(key) - fm.frag(after_placement(key, pk, value))

    def adjust_rows(
        self, scores: FloatArray, model: IntArray, idle: IntArray, healthy: IntArray, k: int
    ) -> FloatArray:
        """Terms added to the gradient scores of ``R`` nodes (none for FGD)."""
        return scores

    def score_nodes(
        self, state: ClusterState, nodes: IntArray, pk: tuple[int, int, int]
    ) -> tuple[FloatArray | list[float], list[tuple[int, ...]]]:
        """:meth:`score_key` of every node in ``nodes``: node by node through the memo when they are few
        (:data:`MEMO_SCORING_UP_TO`), else in one vectorised pass (:meth:`score_rows`)."""
        if nodes.size <= self.memo_scoring_up_to:
            return super().score_nodes(state, nodes, pk)
        return self.score_rows(state, nodes, pk)

    def score_rows(
        self, state: ClusterState, nodes: IntArray, pk: tuple[int, int, int]
    ) -> tuple[FloatArray, list[tuple[int, ...]]]:
        """:meth:`score_key` of every node in ``nodes`` in one vectorised pass (bit-identical: the same
        float operations in the same order, per node, as :meth:`.FragModel._frag` and :func:`fgd_score`).

        The node states before the placement come from the state's arrays; the states after it are
        derived from their per-type statistics (a slice on a GPU of free value ``v`` moves one GPU from
        ``v`` to ``v − m``), so no node key tuple is built and nothing is memoised. Many nodes (a first
        look at a request shape) are first reduced to one per class of identical rows.
        """
        if nodes.size > DEDUPLICATE_ABOVE:
            classes, first, inverse = np.unique(
                state.row_class[nodes], return_index=True, return_inverse=True
            )
            if classes.size < nodes.size:
                scores, vals = self._score_rows(state, nodes[first], pk)
                return scores[inverse], [vals[j] for j in inverse.tolist()]
        return self._score_rows(state, nodes, pk)

    def _score_rows(
        self, state: ClusterState, nodes: IntArray, pk: tuple[int, int, int]
    ) -> tuple[FloatArray, list[tuple[int, ...]]]:
        fm = self._frag
        assert fm is not None
        c, m, k = pk
        ok = state.gpu_ok[nodes]
        rows = np.where(ok, state.gpu_free[nodes], 0).astype(np.int64)
        model = state.model_id[nodes].astype(np.int64)
        cpu = state.cpu_free[nodes]
        total = rows.sum(axis=1)
        healthy = ok.sum(axis=1)
        if k == 1 and 0 < m < GPU_MILLI:
            count_ge, sum_lt = fm.row_stats(rows)
            # Every distinct free value v >= m of a row, in ascending order, grouped by row.
            srt = np.sort(rows, axis=1)
            distinct = srt >= m
            distinct[:, 1:] &= srt[:, 1:] != srt[:, :-1]
            owner, col = np.nonzero(distinct)
            v = srt[owner, col][:, None]
            w = v - m
            tm = fm.stat_milli[None, :]
            v_ge = v >= tm
            w_ge = w >= tm
            cnt = count_ge[owner] - v_ge + w_ge
            low = sum_lt[owner] - np.where(v_ge, 0, v) + np.where(w_ge, 0, w)
            t0, after = self._base_frag(
                state,
                nodes,
                rows,
                model,
                cpu,
                total,
                (count_ge, sum_lt),
                (model[owner], cpu[owner] - c, total[owner] - m, cnt, low),
            )
            per_value = fgd_scores(
                t0[owner] - after,
                self.scale,
                lambda j: self.exact_delta(state, int(nodes[owner[j]]), pk, int(v[j, 0])),
            )
            best = np.full(nodes.size, -1, np.int64)
            np.maximum.at(best, owner, per_value)
            reach = per_value == best[owner]
            values = v[:, 0][reach].tolist()
            counts = np.bincount(owner[reach], minlength=nodes.size).tolist()
            vals: list[tuple[int, ...]] = []
            pos = 0
            for n in counts:
                vals.append(tuple(values[pos : pos + n]))
                pos += n
            scores = best.astype(np.float64)
        else:
            if k > 0 and m > 0:
                srt = np.sort(rows, axis=1)
                big = srt >= m
                new = srt - m * (big & (np.cumsum(big, axis=1) <= k))
                cnt, low = fm.row_stats(new)
                t0, after = self._base_frag(
                    state,
                    nodes,
                    rows,
                    model,
                    cpu,
                    total,
                    None,
                    (model, cpu - c, new.sum(axis=1), cnt, low),
                )
            else:
                stats = fm.row_stats(rows)
                t0, after = self._base_frag(
                    state, nodes, rows, model, cpu, total, stats, (model, cpu - c, total, *stats)
                )
            scores = fgd_scores(
                t0 - after, self.scale, lambda j: self.exact_delta(state, int(nodes[j]), pk, None)
            ).astype(np.float64)
            vals = [()] * nodes.size
        return self.adjust_rows(scores, model, total, healthy, k), vals


def make_fgd(*, typical: Sequence[TypicalPod] = (), seed: int = 0) -> FgdPolicy:
    """Factory for :class:`FgdPolicy` (``seed`` is unused: FGD is deterministic)."""
    return FgdPolicy(typical)
