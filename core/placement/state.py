"""Cluster state as numpy arrays, updated incrementally by :meth:`ClusterState.apply` / ``release``.

Layout (``N`` nodes, ``G`` = the largest GPU count of a node; missing GPUs are padding with ``gpu_ok`` False):

* per node: ``cpu_cap``, ``cpu_free``, ``mem_cap``, ``mem_free`` (int64), ``model_id`` (int16, -1 = no GPU),
  ``schedulable`` (bool), ``labels`` (bool matrix ``N × L``), CPU/memory used by CPU-only work and the limit
  the reservation rule gives it, per-node aggregates (``max_free_milli``, ``whole_free``, ``idle_milli``)
  and a ``version`` counter bumped on every change (policies cache per-node scores against it);
* per GPU: ``gpu_free`` (milli, int32), ``gpu_mem_cap`` / ``gpu_mem_free`` (MiB, int32), ``gpu_numa`` /
  ``gpu_nvlink`` (int16) and ``gpu_ok`` (exists and healthy).

5,000 nodes × 8 GPUs take about 1 MB (see :meth:`ClusterState.nbytes`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .types import GPU_MILLI, Assignment, NodeSpec, ReservationPolicy

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: Tag slots counted per node for GpuClustering: 0 = slice pods, k = k-whole-GPU pods (9 = more than 8).
TAG_SLOTS = 10

_uids = itertools.count(1)

NodeKey = tuple[int, int, tuple[int, ...]]


def assignment_tag(gpu_indices: tuple[int, ...], gpu_milli: int) -> int:
    """GpuClustering tag slot of an assignment (-1 for CPU-only work)."""
    if not gpu_indices:
        return -1
    if len(gpu_indices) == 1 and gpu_milli < GPU_MILLI:
        return 0
    return min(len(gpu_indices), TAG_SLOTS - 1)


class ClusterState:
    """Free and allocated resources of every node and GPU, as arrays (see the module docstring)."""

    def __init__(self) -> None:
        self.uid = next(_uids)
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.models: list[str] = []
        self.model_index: dict[str, int] = {}
        self.label_index: dict[tuple[str, str], int] = {}
        self.reservation = ReservationPolicy()
        self.max_gpus = 0
        self.cpu_cap: IntArray = np.zeros(0, np.int64)
        self.cpu_free: IntArray = np.zeros(0, np.int64)
        self.mem_cap: IntArray = np.zeros(0, np.int64)
        self.mem_free: IntArray = np.zeros(0, np.int64)
        self.cpuonly_cpu_used: IntArray = np.zeros(0, np.int64)
        self.cpuonly_mem_used: IntArray = np.zeros(0, np.int64)
        self.cpuonly_cpu_limit: IntArray = np.zeros(0, np.int64)
        self.cpuonly_mem_limit: IntArray = np.zeros(0, np.int64)
        self.model_id: npt.NDArray[np.int16] = np.zeros(0, np.int16)
        self.schedulable: BoolArray = np.zeros(0, np.bool_)
        self.has_gpu: BoolArray = np.zeros(0, np.bool_)
        self.labels: BoolArray = np.zeros((0, 0), np.bool_)
        self.gpu_free: npt.NDArray[np.int32] = np.zeros((0, 0), np.int32)
        self.gpu_mem_cap: npt.NDArray[np.int32] = np.zeros((0, 0), np.int32)
        self.gpu_mem_free: npt.NDArray[np.int32] = np.zeros((0, 0), np.int32)
        self.gpu_numa: npt.NDArray[np.int16] = np.zeros((0, 0), np.int16)
        self.gpu_nvlink: npt.NDArray[np.int16] = np.zeros((0, 0), np.int16)
        self.gpu_ok: BoolArray = np.zeros((0, 0), np.bool_)
        self.gpu_count: IntArray = np.zeros(0, np.int64)
        self.max_free_milli: IntArray = np.zeros(0, np.int64)
        self.whole_free: IntArray = np.zeros(0, np.int64)
        self.idle_milli: IntArray = np.zeros(0, np.int64)
        self.tags: npt.NDArray[np.int32] = np.zeros((0, TAG_SLOTS), np.int32)
        self.version: IntArray = np.zeros(0, np.int64)
        self.allocated_gpu_milli = 0
        self._keys: list[NodeKey | None] = []
        #: Per node, an id of its current state: model, free CPU and memory, and the multiset of (free milli,
        #: free MiB) of its healthy GPUs. Nodes with equal ids look the same to every node-local score
        #: (FGD, Tessera), whatever the request; see :func:`.placer.representatives`.
        self.row_class: IntArray = np.zeros(0, np.int64)
        self._class_ids: dict[tuple[Any, ...], int] = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[NodeSpec],
        reservation: ReservationPolicy = ReservationPolicy(),  # noqa: B008 (frozen value)
    ) -> ClusterState:
        """Build the state of an empty cluster.

        Args:
            nodes: the nodes (names must be unique).
            reservation: share of CPU/memory on GPU nodes kept for GPU work.

        Returns:
            A state with nothing allocated.
        """
        s = cls()
        n = len(nodes)
        s.reservation = reservation
        s.names = [nd.name for nd in nodes]
        s.index = {name: i for i, name in enumerate(s.names)}
        if len(s.index) != n:
            raise ValueError("node names must be unique")
        g = max((len(nd.gpus) for nd in nodes), default=0)
        s.max_gpus = g
        s.cpu_cap = np.array([nd.cpu_milli for nd in nodes], np.int64)
        s.mem_cap = np.array([nd.memory_mib for nd in nodes], np.int64)
        s.cpu_free = s.cpu_cap.copy()
        s.mem_free = s.mem_cap.copy()
        s.schedulable = np.array([nd.schedulable for nd in nodes], np.bool_)
        s.has_gpu = np.array([len(nd.gpus) > 0 for nd in nodes], np.bool_)
        s.model_id = np.full(n, -1, np.int16)
        for i, nd in enumerate(nodes):
            model = nd.gpu_model or (nd.gpus[0].model if nd.gpus else "")
            if nd.gpus and model:
                s.model_id[i] = s.model_index.setdefault(model, len(s.model_index))
        s.models = list(s.model_index)
        for nd in nodes:
            for kv in nd.labels:
                s.label_index.setdefault(kv, len(s.label_index))
        s.labels = np.zeros((n, len(s.label_index)), np.bool_)
        for i, nd in enumerate(nodes):
            for kv in nd.labels:
                s.labels[i, s.label_index[kv]] = True
        s.gpu_free = np.zeros((n, g), np.int32)
        s.gpu_mem_cap = np.zeros((n, g), np.int32)
        s.gpu_numa = np.zeros((n, g), np.int16)
        s.gpu_nvlink = np.zeros((n, g), np.int16)
        s.gpu_ok = np.zeros((n, g), np.bool_)
        for i, nd in enumerate(nodes):
            for j, gpu in enumerate(sorted(nd.gpus, key=lambda x: x.index)):
                if gpu.index != j:
                    raise ValueError(f"node {nd.name}: GPU indices must be 0..{len(nd.gpus) - 1}")
                s.gpu_free[i, j] = GPU_MILLI
                s.gpu_mem_cap[i, j] = gpu.memory_mib
                s.gpu_numa[i, j] = gpu.numa_node
                s.gpu_nvlink[i, j] = gpu.nvlink_group
                s.gpu_ok[i, j] = gpu.healthy
        s.gpu_mem_free = s.gpu_mem_cap.copy()
        s.gpu_count = np.array([len(nd.gpus) for nd in nodes], np.int64)
        cpu_keep = np.floor(s.cpu_cap * reservation.gpu_node_cpu_fraction).astype(np.int64)
        mem_keep = np.floor(s.mem_cap * reservation.gpu_node_memory_fraction).astype(np.int64)
        s.cpuonly_cpu_limit = np.where(s.has_gpu, s.cpu_cap - cpu_keep, s.cpu_cap)
        s.cpuonly_mem_limit = np.where(s.has_gpu, s.mem_cap - mem_keep, s.mem_cap)
        s.cpuonly_cpu_used = np.zeros(n, np.int64)
        s.cpuonly_mem_used = np.zeros(n, np.int64)
        s.tags = np.zeros((n, TAG_SLOTS), np.int32)
        s.version = np.zeros(n, np.int64)
        s.max_free_milli = np.zeros(n, np.int64)
        s.whole_free = np.zeros(n, np.int64)
        s.idle_milli = np.zeros(n, np.int64)
        s._keys = [None] * n
        s.row_class = np.zeros(n, np.int64)
        for i in range(n):
            s._refresh(i)
        return s

    def copy(self) -> ClusterState:
        """An independent deep copy (with a new ``uid``, so policy caches do not mix the two)."""
        c = ClusterState.__new__(ClusterState)
        for name, value in self.__dict__.items():
            setattr(c, name, value.copy() if isinstance(value, np.ndarray | list | dict) else value)
        c.uid = next(_uids)
        return c

    # ------------------------------------------------------------------ mutation
    def _refresh(self, i: int) -> None:
        """Recompute the per-node aggregates of node ``i`` and bump its version."""
        # One node has a handful of GPUs: plain Python over its row beats a dozen numpy calls.
        ok = self.gpu_ok[i].tolist()
        free = self.gpu_free[i].tolist()
        mem = self.gpu_mem_free[i].tolist()
        cap = self.gpu_mem_cap[i].tolist()
        healthy = [f if o else 0 for f, o in zip(free, ok, strict=True)]
        self.max_free_milli[i] = max(healthy, default=0)
        self.whole_free[i] = sum(
            1
            for f, o, m, c in zip(free, ok, mem, cap, strict=True)
            if o and f == GPU_MILLI and m == c
        )
        self.idle_milli[i] = sum(healthy)
        self.version[i] += 1
        gpus = sorted((f, m) for f, m, o in zip(free, mem, ok, strict=True) if o)
        model, cpu = int(self.model_id[i]), int(self.cpu_free[i])
        # :meth:`node_key` from the sorted healthy GPUs at hand (their free milli, ascending), rather
        # than from the arrays again when a policy first asks.
        self._keys[i] = (model, cpu, tuple([f for f, _ in gpus]))
        self._classify(i, (model, cpu, int(self.mem_free[i]), tuple(gpus)))

    def _row(self, i: int) -> tuple[Any, ...]:
        ok = self.gpu_ok[i]
        gpus = sorted(
            zip(self.gpu_free[i][ok].tolist(), self.gpu_mem_free[i][ok].tolist(), strict=True)
        )
        return (int(self.model_id[i]), int(self.cpu_free[i]), int(self.mem_free[i]), tuple(gpus))

    def _classify(self, i: int, row: tuple[Any, ...]) -> None:
        ids = self._class_ids
        if len(ids) > 4 * len(self.names) + 64:
            # Ids of rows no node has any more pile up on a long-lived state: intern the current rows
            # again (ids stay equal exactly for equal rows, which is all they promise).
            ids.clear()
            for k in range(len(self.names)):
                if k != i:
                    self.row_class[k] = ids.setdefault(self._row(k), len(ids))
        self.row_class[i] = ids.setdefault(row, len(ids))

    def _check(self, a: Assignment) -> int:
        i = self.index.get(a.node)
        if i is None:
            raise ValueError(f"unknown node {a.node!r}")
        if len(set(a.gpu_indices)) != len(a.gpu_indices):
            raise ValueError(f"{a.request_id}: duplicate GPU indices {a.gpu_indices}")
        for j in a.gpu_indices:
            if not 0 <= j < self.gpu_count[i]:
                raise ValueError(f"{a.request_id}: node {a.node} has no GPU {j}")
        if a.cpu_milli < 0 or a.memory_mib < 0 or a.gpu_milli < 0 or a.gpu_memory_mib < 0:
            raise ValueError(f"{a.request_id}: negative amounts")
        return i

    def apply(self, assignment: Assignment) -> None:
        """Allocate an assignment.

        Args:
            assignment: what to take (node, GPUs, amounts).

        Raises:
            ValueError: if it does not fit (CPU, memory, reservation, GPU compute or memory, unhealthy GPU).
        """
        a = assignment
        i = self._check(a)
        if a.cpu_milli > self.cpu_free[i] or a.memory_mib > self.mem_free[i]:
            raise ValueError(f"{a.request_id}: CPU or memory does not fit on {a.node}")
        cpu_only = not a.gpu_indices
        if cpu_only and (
            self.cpuonly_cpu_used[i] + a.cpu_milli > self.cpuonly_cpu_limit[i]
            or self.cpuonly_mem_used[i] + a.memory_mib > self.cpuonly_mem_limit[i]
        ):
            raise ValueError(
                f"{a.request_id}: CPU-only work exceeds the reserved share on {a.node}"
            )
        whole = a.gpu_milli >= GPU_MILLI
        for j in a.gpu_indices:
            if not self.gpu_ok[i, j]:
                raise ValueError(f"{a.request_id}: GPU {j} of {a.node} is unhealthy")
            if whole:
                if (
                    self.gpu_free[i, j] != GPU_MILLI
                    or self.gpu_mem_free[i, j] != self.gpu_mem_cap[i, j]
                ):
                    raise ValueError(f"{a.request_id}: GPU {j} of {a.node} is not completely free")
            elif a.gpu_milli > self.gpu_free[i, j] or a.gpu_memory_mib > self.gpu_mem_free[i, j]:
                raise ValueError(f"{a.request_id}: slice does not fit on GPU {j} of {a.node}")
        self.cpu_free[i] -= a.cpu_milli
        self.mem_free[i] -= a.memory_mib
        if cpu_only:
            self.cpuonly_cpu_used[i] += a.cpu_milli
            self.cpuonly_mem_used[i] += a.memory_mib
        for j in a.gpu_indices:
            if whole:
                self.gpu_free[i, j] = 0
                self.gpu_mem_free[i, j] = 0
            else:
                self.gpu_free[i, j] -= a.gpu_milli
                self.gpu_mem_free[i, j] -= a.gpu_memory_mib
        tag = assignment_tag(a.gpu_indices, a.gpu_milli)
        if tag >= 0:
            self.tags[i, tag] += 1
        self.allocated_gpu_milli += len(a.gpu_indices) * min(a.gpu_milli, GPU_MILLI)
        self._refresh(i)

    def release(self, assignment: Assignment) -> None:
        """Free an assignment made by :meth:`apply` (its exact inverse).

        Args:
            assignment: an assignment previously applied to this state.

        Raises:
            ValueError: if releasing it would exceed a capacity (it was not applied).
        """
        self._refresh(self._free(assignment))

    def release_many(self, assignments: Iterable[Assignment]) -> None:
        """:meth:`release` of each, the per-node aggregates recomputed once per node touched (a
        reclaim that frees thousands of placements on a few hundred nodes)."""
        touched: set[int] = set()
        try:
            for a in assignments:
                touched.add(self._free(a))
        finally:  # one that was not applied raises: those freed before it stay consistent
            for i in sorted(touched):
                self._refresh(i)

    def _free(self, assignment: Assignment) -> int:
        """The amounts of :meth:`release`, without the aggregates; returns the node's row."""
        a = assignment
        i = self._check(a)
        whole = a.gpu_milli >= GPU_MILLI
        if self.cpu_free[i] + a.cpu_milli > self.cpu_cap[i] or (
            self.mem_free[i] + a.memory_mib > self.mem_cap[i]
        ):
            raise ValueError(f"{a.request_id}: release exceeds the capacity of {a.node}")
        for j in a.gpu_indices:
            if whole and (self.gpu_free[i, j] != 0 or self.gpu_mem_free[i, j] != 0):
                raise ValueError(f"{a.request_id}: GPU {j} of {a.node} is not held whole")
            if not whole and (
                self.gpu_free[i, j] + a.gpu_milli > GPU_MILLI
                or self.gpu_mem_free[i, j] + a.gpu_memory_mib > self.gpu_mem_cap[i, j]
            ):
                raise ValueError(f"{a.request_id}: release exceeds GPU {j} of {a.node}")
        self.cpu_free[i] += a.cpu_milli
        self.mem_free[i] += a.memory_mib
        if not a.gpu_indices:
            self.cpuonly_cpu_used[i] -= a.cpu_milli
            self.cpuonly_mem_used[i] -= a.memory_mib
        for j in a.gpu_indices:
            if whole:
                self.gpu_free[i, j] = GPU_MILLI
                self.gpu_mem_free[i, j] = self.gpu_mem_cap[i, j]
            else:
                self.gpu_free[i, j] += a.gpu_milli
                self.gpu_mem_free[i, j] += a.gpu_memory_mib
        tag = assignment_tag(a.gpu_indices, a.gpu_milli)
        if tag >= 0:
            self.tags[i, tag] -= 1
        self.allocated_gpu_milli -= len(a.gpu_indices) * min(a.gpu_milli, GPU_MILLI)
        return i

    # ------------------------------------------------------------------ read helpers
    def __len__(self) -> int:
        return len(self.names)

    def node_key(self, i: int) -> NodeKey:
        """Hashable summary of node ``i`` for per-state score caches: (model id, free CPU, sorted free
        milli of its healthy GPUs). Two nodes with equal keys look the same to every fragmentation score."""
        k = self._keys[i]
        if k is None:
            free = self.gpu_free[i][self.gpu_ok[i]]
            k = (int(self.model_id[i]), int(self.cpu_free[i]), tuple(sorted(free.tolist())))
            self._keys[i] = k
        return k

    def node_keys(self, nodes: list[int]) -> list[NodeKey]:
        """:meth:`node_key` of each of ``nodes`` (one call for the few stale nodes of a decision)."""
        keys = self._keys
        out: list[NodeKey] = []
        for i in nodes:
            k = keys[i]
            out.append(self.node_key(i) if k is None else k)
        return out

    def node_free(self, name: str) -> dict[str, Any]:
        """Free resources of one node: CPU, memory, and per GPU (index, free milli, free memory, healthy)."""
        i = self.index[name]
        return {
            "cpu_milli": int(self.cpu_free[i]),
            "memory_mib": int(self.mem_free[i]),
            "gpus": [
                (j, int(self.gpu_free[i, j]), int(self.gpu_mem_free[i, j]), bool(self.gpu_ok[i, j]))
                for j in range(int(self.gpu_count[i]))
            ],
        }

    def totals(self) -> dict[str, int]:
        """Cluster totals: capacity and allocation of CPU, memory and (healthy) GPU compute/memory."""
        ok = self.gpu_ok
        return {
            "cpu_milli": int(self.cpu_cap.sum()),
            "cpu_milli_allocated": int((self.cpu_cap - self.cpu_free).sum()),
            "memory_mib": int(self.mem_cap.sum()),
            "memory_mib_allocated": int((self.mem_cap - self.mem_free).sum()),
            "gpus": int(ok.sum()),
            "gpu_milli": int(ok.sum()) * GPU_MILLI,
            "gpu_milli_allocated": int(np.where(ok, GPU_MILLI - self.gpu_free, 0).sum()),
            "gpu_memory_mib": int(np.where(ok, self.gpu_mem_cap, 0).sum()),
            "gpu_memory_mib_allocated": int(
                np.where(ok, self.gpu_mem_cap - self.gpu_mem_free, 0).sum()
            ),
        }

    def largest_free_slice(self, nodes: BoolArray | None = None) -> tuple[int, int] | None:
        """Largest ``(gpu_milli, gpu_memory_mib)`` free on one healthy GPU (most milli, then memory).

        Args:
            nodes: optional node mask to look at (default: schedulable nodes).

        Returns:
            The slice, or ``None`` when no such GPU has anything free.
        """
        mask = self.schedulable if nodes is None else nodes
        ok = self.gpu_ok & mask[:, None]
        if not ok.any():
            return None
        key = np.where(ok, self.gpu_free.astype(np.int64) * (1 << 32) + self.gpu_mem_free, -1)
        flat = int(np.argmax(key))
        i, j = divmod(flat, self.max_gpus)
        if key[i, j] <= 0 or self.gpu_free[i, j] == 0:
            return None
        return int(self.gpu_free[i, j]), int(self.gpu_mem_free[i, j])

    def nbytes(self) -> int:
        """Bytes held by the numpy arrays of the state (the memory figure of the bench)."""
        return sum(v.nbytes for v in self.__dict__.values() if isinstance(v, np.ndarray))
