"""FGD's target workload ("typical pods", protocol §6.1) and node fragmentation (§6.2).

``F(node) = Σ_t p_t · fragment_t(node)``: the expected idle GPU milli of the node that a random pod of the
target workload could not use. The sum is accumulated per category in the simulator's order (Q1, Q2, Q4,
XL, XR, NA, each summed over the types in list order) so that the float values, and therefore FGD's
truncated integer scores, are bit-identical to the original.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from .memo import TwoGenerationMemo
from .state import NodeKey
from .types import PlacementRequest, TypicalPod

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Distance of a vectorised score from a truncation boundary under which it is recomputed exactly (the
#: vectorised sums differ from the scalar ones by less than 1e-12 of a score point).
EXACT_MARGIN = 1e-7
#: Node states whose fragmentation is memoised (two generations of this many: about 2 × 25 MB at most).
FRAG_MEMO_CAPACITY = 65_536

PodKey = tuple[int, int, int]  # (cpu milli, gpu milli per GPU, gpu count)


def pod_type_key(request: PlacementRequest) -> tuple[int, int, int, str]:
    """The FGD type of a request: (cpu milli, gpu milli per GPU, gpu count, raw model spec)."""
    if request.is_cpu_only:
        return (request.cpu_milli, 0, 0, "")
    return (request.cpu_milli, request.gpu_milli, request.gpu_count, "|".join(request.gpu_models))


def typical_pods(
    requests: Iterable[PlacementRequest], threshold: float = 0.95
) -> tuple[TypicalPod, ...]:
    """FGD's typical pods: the most frequent pod types covering ``threshold`` of all pods.

    Types are sorted by count, then by (cpu, milli, count, spec) descending; the first ones are kept until
    their cumulative share reaches ``threshold``; each kept type's frequency is its count divided by the
    kept types' total count (this form reproduces more of the published per-seed rows than dividing the
    shares by their cumulative sum).

    Args:
        requests: the workload (for the protocol: the original trace, before tuning).
        threshold: popularity threshold (0.95 in the paper).

    Returns:
        The typical pods with their frequencies.
    """
    counts: dict[tuple[int, int, int, str], int] = {}
    total = 0
    for r in requests:
        k = pod_type_key(r)
        counts[k] = counts.get(k, 0) + 1
        total += 1
    if total == 0:
        return ()
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    kept: list[tuple[tuple[int, int, int, str], int]] = []
    cum = 0.0
    for key, cnt in ranked:
        if cum >= threshold:
            break
        kept.append((key, cnt))
        cum += cnt / total
    covered = sum(cnt for _, cnt in kept)
    return tuple(TypicalPod(k[0], k[1], k[2], k[3], cnt / covered) for k, cnt in kept)


class FragModel:
    """Fragmentation of node states against a fixed list of typical pods, memoised per node state.

    Args:
        typical: the target workload.
        model_index: GPU model name -> model id of the cluster state.
    """

    def __init__(
        self,
        typical: Iterable[TypicalPod],
        model_index: Mapping[str, int],
        *,
        no_access_is_fragment: bool = True,
    ) -> None:
        self.typical = tuple(typical)
        self.no_access_is_fragment = no_access_is_fragment
        self.types: list[tuple[int, int, int, float, frozenset[int] | None]] = []
        for t in self.typical:
            access: frozenset[int] | None = None
            if t.gpu_spec and t.gpu_milli > 0:
                names = t.gpu_spec.split("|")
                access = frozenset(model_index[n] for n in names if n in model_index)
            self.types.append((t.cpu_milli, t.gpu_milli, t.gpu_count, t.freq, access))
        self._memo: TwoGenerationMemo[NodeKey, float] = TwoGenerationMemo(FRAG_MEMO_CAPACITY)
        #: The typical types' distinct CPU requests, ascending: ``F`` sees a node's free CPU only through
        #: ``cpu >= c`` against these, so the memo keys a state by how many of them its CPU reaches.
        self.cpu_thresholds = sorted({t[0] for t in self.types})
        self.type_cpu = np.array([t[0] for t in self.types], np.int64)
        self.type_milli = np.array([t[1] for t in self.types], np.int64)
        self.type_count = np.array([t[2] for t in self.types], np.int64)
        self.type_freq = np.array([t[3] for t in self.types], np.float64)
        models = sorted(set(model_index.values()))
        #: Row ``model id + 1`` (row 0: a node without a GPU model): True where a GPU type cannot use it.
        self._no_access = np.zeros((max(models, default=-1) + 2, len(self.types)), np.bool_)
        for col, (_c, m, _k, _p, access) in enumerate(self.types):
            if m > 0 and access is not None:
                for row in range(self._no_access.shape[0]):
                    self._no_access[row, col] = (row - 1) not in access
        # Per model row, the masks of :meth:`frag_rows` that do not depend on the node state (computed
        # once here rather than on every call).
        cpu_only = self.type_milli == 0
        #: Types that use the node's GPUs (a GPU type with access to the model), per model row.
        self._gpu_use = ~cpu_only[None, :] & ~self._no_access
        counted = (
            cpu_only[None, :] | self._gpu_use | self._no_access
            if no_access_is_fragment
            else cpu_only[None, :] | self._gpu_use
        )
        #: Types whose fragment counts the node's idle GPU milli when they do not fit, per model row.
        self._counted = counted
        self._all_counted = bool(counted.all())
        #: The typical types' distinct GPU milli, ascending (13 for the 35 typical pods of openb's default
        #: trace): :meth:`row_stats` counts per distinct value, :meth:`frag_rows` spreads them per type.
        self.stat_milli: IntArray = np.unique(self.type_milli)
        #: Per type, the column of its milli in :attr:`stat_milli`.
        self._type_stat: IntArray = np.searchsorted(self.stat_milli, self.type_milli)

    def frag(self, key: NodeKey) -> float:
        """``F(node)`` in GPU milli for a node state ``(model id, free CPU, sorted free GPU milli)``.

        Memoised per :meth:`memo_key`: states that differ only in free CPU between two consecutive typical
        CPU requests take the same branches of :meth:`_frag`, so the same float operations and value.
        """
        model, cpu, idle = key
        mk = (model, bisect_right(self.cpu_thresholds, cpu), idle)  # :meth:`memo_key`, inlined
        v = self._memo.get(mk)
        if v is None:
            v = self._frag(key)
            self._memo[mk] = v
        return v

    def memo_key(self, key: NodeKey) -> NodeKey:
        """``key`` with its free CPU replaced by how many typical CPU requests it reaches (``F`` is the
        same for every state of one memo key)."""
        model, cpu, idle = key
        return (model, bisect_right(self.cpu_thresholds, cpu), idle)

    def _frag(self, key: NodeKey) -> float:
        model, cpu, idle = key
        total = sum(idle)
        prefix = [0]
        for g in idle:
            prefix.append(prefix[-1] + g)
        n = len(idle)
        q1 = q2 = q4 = xl = xr = na = 0.0
        for c, m, k, p, access in self.types:
            if m == 0:
                if cpu >= c:
                    xl += p * total
                else:
                    xr += p * total
            elif access is not None and model not in access:
                if self.no_access_is_fragment:
                    na += p * total
            else:
                pos = bisect_left(idle, m)
                if n - pos >= k:
                    if cpu >= c:
                        q2 += p * prefix[pos]
                    else:
                        q4 += p * total
                elif cpu >= c:
                    q2 += p * total
                else:
                    q1 += p * total
        out = 0.0
        for part in (q1, q2, q4, xl, xr, na):
            out += part
        return out

    def row_stats(self, rows: IntArray) -> tuple[IntArray, IntArray]:
        """Per row of free GPU milli (``R × G``, 0 for a missing or unhealthy GPU) and per distinct typical
        milli (:attr:`stat_milli`, ``U`` columns): how many GPUs have at least that milli, and the sum of
        the free milli of the others (``n − pos`` and ``prefix[pos]`` of :meth:`_frag`; order-free, so
        rows need not be sorted).

        Each GPU falls in one band between consecutive distinct milli (how many of them its free milli
        reaches); two per-row histograms of the bands (GPUs, free milli) and their running sums give both
        arrays, rather than comparing every GPU with every type (``R × G × T`` work, issue 18). The milli
        sums go through float64 ``bincount`` weights, exact for integers far beyond any row's total.
        """
        n_rows, n_gpus = rows.shape
        width = self.stat_milli.size + 1
        band = np.searchsorted(self.stat_milli, rows, side="right")
        band += np.arange(0, n_rows * width, width)[:, None]
        flat = band.ravel()
        gpus = np.bincount(flat, minlength=n_rows * width).reshape(n_rows, width)
        milli = np.bincount(flat, weights=rows.ravel(), minlength=n_rows * width)
        count_ge: IntArray = n_gpus - np.cumsum(gpus, axis=1)[:, :-1]
        sum_lt: IntArray = np.cumsum(milli.reshape(n_rows, width), axis=1)[:, :-1].astype(np.int64)
        return count_ge, sum_lt

    def frag_rows(
        self,
        model: IntArray,
        cpu: IntArray,
        total: IntArray,
        count_ge: IntArray,
        sum_lt: IntArray,
    ) -> FloatArray:
        """:meth:`frag` of ``R`` node states at once, up to float rounding.

        Args:
            model: model id per state (-1: no GPU model).
            cpu: free CPU milli per state.
            total: idle GPU milli per state.
            count_ge: :meth:`row_stats`'s first array (``R × U``, per distinct typical milli).
            sum_lt: its second array.

        Returns:
            ``F`` per state, summed as one matrix product rather than per category in the simulator's
            order: it may differ from :meth:`frag` in the last bits (at most ``T · 2⁻⁵² · F``, below
            1e-9 milli for any real node). Callers that truncate it, as FGD's score does, recompute the
            few values that land within :data:`EXACT_MARGIN` of a truncation boundary with :meth:`frag`.
        """
        if not self.types:
            return np.zeros(model.shape[0], np.float64)
        row = model + 1
        col = self._type_stat
        partial = self._gpu_use[row]
        partial &= cpu[:, None] >= self.type_cpu
        partial &= count_ge[:, col] >= self.type_count
        low = sum_lt[:, col]
        if self._all_counted:
            x = np.where(partial, low, total[:, None])
        else:
            x = np.where(partial, low, np.where(self._counted[row], total[:, None], 0))
        out: FloatArray = x.astype(np.float64) @ self.type_freq
        return out


def after_placement(key: NodeKey, pod: PodKey, gpu_value: int | None) -> NodeKey:
    """Node state after placing ``pod``.

    A slice goes on one GPU whose free milli is ``gpu_value``; other pods take the first ``count`` GPUs
    with enough free milli in ascending free order (whole GPUs: completely free ones), as the simulator's
    ``NodeResource.Sub`` does.
    """
    model, cpu, idle = key
    c, m, k = pod
    new = list(idle)
    if gpu_value is not None:
        new.remove(gpu_value)
        new.append(gpu_value - m)
    elif k > 0 and m > 0:
        pos = bisect_left(idle, m)
        for j in range(pos, pos + k):
            new[j] -= m
    new.sort()
    return (model, cpu - c, tuple(new))
