"""The policy interface and the helpers every policy shares (tie-break, default GPU choice, score cache).

A policy sees the state, one valid request, the indices of the feasible nodes (``cand``, never empty) and
the node priorities (``prio``, lower wins a score tie, as the protocol's node-name prefix does). It returns
the chosen node index and the GPU indices on it. Policies may keep caches; a cache is tied to one state
(``state.uid``) and to each node's ``version``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ..gpu_select import best_slice_gpu, slice_candidates, whole_gpus
from ..memo import LruTables, TwoGenerationMemo, deep_sizeof
from ..state import BoolArray, ClusterState, NodeKey
from ..types import GPU_MILLI, PlacementRequest, TypicalPod

Choice = tuple[int, tuple[int, ...]]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Scale constants of the simulator (``MaxSpecCpu``, ``MaxSpecGpu``).
MAX_SPEC_CPU = 128000.0
MAX_SPEC_GPU = 8000.0
#: Request shapes whose per-node score vectors are kept (least recently used dropped first).
SCORE_TABLES = 128
#: Scores memoised per (node state, request shape), two generations of this many (~450 accounted bytes an
#: entry: at most ~15 MB, which keeps a 5,000 × 8 fill's state + caches under 64 MB beside the
#: fragmentation memo).
SCORE_MEMO_CAPACITY = 16_384

#: :meth:`CachedNodeScorer.choose` works on the whole node axis (contiguous comparisons) rather than gathering
#: the candidates' entries when the candidates are at least this share of the nodes (most decisions of a
#: fill: ~4,650 of 5,000 nodes are feasible at 30-40 %, and a gather costs about 20 times a contiguous
#: comparison per element, issue 18).
DENSE_SHARE = 0.125

#: Per request shape: score per node, the node version it was computed at, the slice GPU values per node.
ScoreTable = tuple[FloatArray, IntArray, list[tuple[int, ...]]]


class Policy(Protocol):
    """A placement policy: score the feasible nodes, pick one, choose its GPUs."""

    name: str

    def choose(
        self, state: ClusterState, request: PlacementRequest, cand: IntArray, prio: IntArray
    ) -> Choice:
        """Pick a node among ``cand`` and the GPUs on it."""
        ...


class PolicyFactory(Protocol):
    """Builds a policy; ``typical`` is the target workload (used by FGD and Tessera only)."""

    def __call__(self, *, typical: Sequence[TypicalPod] = (), seed: int = 0) -> Policy: ...


def pick(cand: IntArray, scores: npt.NDArray[np.int64] | FloatArray, prio: IntArray) -> int:
    """Highest score wins; among equal scores the lowest priority value (protocol §4.4)."""
    best = scores.max()
    sel = cand[scores == best]
    if sel.size == 1:
        return int(sel[0])
    return int(sel[int(np.argmin(prio[sel]))])


def pick_masked(mask: BoolArray, scores: FloatArray, prio: IntArray) -> int:
    """:func:`pick` of the nodes in ``mask`` (not empty), ``scores`` given for every node: the same node
    (the best score, then the lowest priority, then the lowest index)."""
    total = np.where(mask, scores, -np.inf)
    sel = (total == total.max()).nonzero()[0]
    if sel.size == 1:
        return int(sel[0])
    return int(sel[int(np.argmin(prio[sel]))])


def default_gpus(state: ClusterState, i: int, request: PlacementRequest) -> tuple[int, ...]:
    """The ``best`` GPU rule of §4.5: a slice on the tightest GPU that fits (lowest index on ties),
    whole GPUs on the lowest-index free GPUs, nothing for CPU-only work."""
    if request.is_cpu_only:
        return ()
    if request.is_whole_gpu:
        return whole_gpus(state, i, request)
    return (best_slice_gpu(state, i, request),)


def pod_key(request: PlacementRequest) -> tuple[int, int, int]:
    """(cpu milli, gpu milli per GPU, gpu count) of a request; (cpu, 0, 0) when CPU-only."""
    if request.is_cpu_only:
        return (request.cpu_milli, 0, 0)
    return (request.cpu_milli, request.gpu_milli, request.gpu_count)


class CachedNodeScorer:
    """Base for policies whose node score depends only on the node's own state (:meth:`ClusterState.node_key`).

    Subclasses implement :meth:`score_key`, returning ``(score, gpu values)`` where ``gpu values`` are the
    free-milli values of the GPUs that reach the score for a slice (the GPU chosen is the lowest-index one
    with such a value). Scores are cached per request shape and per node, and recomputed only for nodes whose
    ``version`` changed since (:meth:`score_nodes`, which subclasses may vectorise); results are memoised per
    node state too, so identical nodes cost one evaluation. Both caches are bounded (:data:`SCORE_TABLES`,
    :data:`SCORE_MEMO_CAPACITY`), so their memory does not grow with the number of decisions.
    """

    name = "cached"

    def __init__(self) -> None:
        self._uid = -1
        self._tables: LruTables[tuple[int, int, int], ScoreTable] = LruTables(SCORE_TABLES)
        self._memo: TwoGenerationMemo[
            tuple[NodeKey, tuple[int, int, int]], tuple[float, tuple[int, ...]]
        ] = TwoGenerationMemo(SCORE_MEMO_CAPACITY)

    def cache_nbytes(self) -> int:
        """Approximate bytes held by the policy's caches (score tables and memos)."""
        seen: set[int] = set()
        total = 0
        for table in self._tables.values():
            total += deep_sizeof(table[0], seen) + deep_sizeof(table[1], seen)
            total += deep_sizeof(table[2], seen)
        return total + self._memo.nbytes()

    def score_nodes(
        self, state: ClusterState, nodes: IntArray, pk: tuple[int, int, int]
    ) -> tuple[FloatArray | list[float], list[tuple[int, ...]]]:
        """Scores and slice GPU values of ``nodes`` (their current state) for a request shape, via
        :meth:`score_key` and the memo; a subclass may compute them in one vectorised pass instead."""
        memo = self._memo
        keys = state.node_keys(nodes.tolist())
        scores: list[float] = []
        vals: list[tuple[int, ...]] = []
        for key in keys:
            mk = (key, pk)
            r = memo.get(mk)
            if r is None:
                r = self.score_key(key, pk, None)
                memo[mk] = r
            scores.append(r[0])
            vals.append(r[1])
        return scores, vals

    def score_key(
        self, key: NodeKey, pod: tuple[int, int, int], allowed: frozenset[int] | None
    ) -> tuple[float, tuple[int, ...]]:
        """Score of a node state for a pod; ``allowed`` restricts the GPU values a slice may use."""
        raise NotImplementedError

    def dynamic_term(
        self, state: ClusterState, request: PlacementRequest, cand: IntArray
    ) -> FloatArray | None:
        """Optional score term that depends on more than the node key (added after the cache)."""
        return None

    def choose(
        self,
        state: ClusterState,
        request: PlacementRequest,
        cand: IntArray,
        prio: IntArray,
        *,
        mask: BoolArray | None = None,
    ) -> Choice:
        """Pick the best-scoring node (ties -> lowest priority value) and its GPUs.

        ``mask``: optionally, ``cand`` as a boolean mask over the nodes (exactly its nodes), which the
        placer has; with it, many candidates are handled along the whole node axis (:data:`DENSE_SHARE`).
        The choice is the same either way."""
        if state.uid != self._uid:
            self._uid = state.uid
            self._tables.clear()
        pk = pod_key(request)
        slice_mem = (
            (not request.is_cpu_only)
            and (not request.is_whole_gpu)
            and (request.gpu_memory_mib > 0)
        )
        if slice_mem:
            return self._choose_uncached(state, request, cand, prio, pk)
        n = len(state)
        table = self._tables.get_or_create(
            pk, lambda: (np.zeros(n, np.float64), np.full(n, -1, np.int64), [()] * n)
        )
        scores, vers, vals = table
        extra = self.dynamic_term(state, request, cand)
        dense = mask is not None and extra is None and cand.size >= DENSE_SHARE * n
        if dense:
            assert mask is not None
            changed = vers != state.version
            changed &= mask
            stale = changed.nonzero()[0]
        else:
            stale = cand[vers[cand] != state.version[cand]]
        if stale.size:
            new_scores, new_vals = self.score_nodes(state, stale, pk)
            scores[stale] = new_scores
            # only slices have GPU values; the rest stay ()
            if pk[2] == 1 and 0 < pk[1] < GPU_MILLI:
                for i, v in zip(stale.tolist(), new_vals, strict=True):
                    vals[i] = v
            vers[stale] = state.version[stale]
        if dense:
            assert mask is not None
            i = pick_masked(mask, scores, prio)
        else:
            total = scores[cand]
            if extra is not None:
                total = total + extra
            i = pick(cand, total, prio)
        return i, self._gpus(state, i, request, vals[i])

    def _choose_uncached(
        self,
        state: ClusterState,
        request: PlacementRequest,
        cand: IntArray,
        prio: IntArray,
        pk: tuple[int, int, int],
    ) -> Choice:
        scores = np.zeros(cand.size, np.float64)
        vals: list[tuple[int, ...]] = []
        for pos, i in enumerate(cand.tolist()):
            allowed = frozenset(
                int(v) for v in state.gpu_free[i, slice_candidates(state, i, request)]
            )
            s, v = self.score_key(state.node_key(i), pk, allowed)
            scores[pos] = s
            vals.append(v)
        extra = self.dynamic_term(state, request, cand)
        if extra is not None:
            scores = scores + extra
        i = pick(cand, scores, prio)
        return i, self._gpus(state, i, request, vals[int(np.flatnonzero(cand == i)[0])])

    @staticmethod
    def _gpus(
        state: ClusterState, i: int, request: PlacementRequest, values: tuple[int, ...]
    ) -> tuple[int, ...]:
        if request.is_cpu_only or request.is_whole_gpu:
            return default_gpus(state, i, request)
        cand = slice_candidates(state, i, request)
        for j in cand.tolist():
            if int(state.gpu_free[i, j]) in values:
                return (j,)
        return (best_slice_gpu(state, i, request),)
