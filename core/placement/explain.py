"""Explanations: why a request cannot be placed now, as data a person can read."""

from __future__ import annotations

import numpy as np

from .filters import feasible_mask, filter_steps, validate
from .state import ClusterState
from .types import PlacementRequest, Unplaced, UnplacedReason


def _describe(request: PlacementRequest) -> str:
    r = request
    parts = [f"{r.cpu_milli}m CPU", f"{r.memory_mib} MiB memory"]
    if r.is_whole_gpu:
        parts.append(f"{r.gpu_count} whole GPU{'s' if r.gpu_count > 1 else ''}")
    elif not r.is_cpu_only:
        mem = f" + {r.gpu_memory_mib} MiB" if r.gpu_memory_mib else ""
        parts.append(f"a {r.gpu_milli}m GPU slice{mem}")
    if r.gpu_models:
        parts.append("model " + "|".join(dict.fromkeys(r.gpu_models)))
    return ", ".join(parts)


def explain(state: ClusterState, request: PlacementRequest) -> Unplaced | None:
    """Why ``request`` cannot be placed on ``state`` right now.

    Runs the filters in order and counts how many of the remaining nodes each one excluded.

    Args:
        state: the cluster (not modified).
        request: the request.

    Returns:
        ``None`` when some node can host it; otherwise an :class:`Unplaced` whose reason is the constraint
        that excluded the last candidate nodes, with per-constraint counts, a sentence, and the largest
        GPU slice free on a node that passes every non-GPU filter.
    """
    problem = validate(request)
    if problem is not None:
        return Unplaced(
            request.request_id, UnplacedReason.INVALID_REQUEST, f"Invalid request: {problem}."
        )
    if feasible_mask(state, request).any():
        return None
    n = len(state)
    alive = np.ones(n, np.bool_)
    host_ok = np.ones(n, np.bool_)  # passes every non-GPU-capacity filter
    failed: list[tuple[str, int]] = []
    reason = UnplacedReason.INSUFFICIENT_GPU
    for name, why, fn in filter_steps(request):
        mask = fn(state, request)
        excluded = int((alive & ~mask).sum())
        if name not in ("GPU capacity", "GPU memory", "topology"):
            host_ok &= mask
        if excluded:
            failed.append((name, excluded))
            if (alive & mask).sum() == 0:
                reason = why
        alive &= mask
    if n == 0:
        failed.append(("no nodes", 0))
        reason = UnplacedReason.INSUFFICIENT_CPU if request.is_cpu_only else reason
    slice_ = None if request.is_cpu_only else state.largest_free_slice(host_ok & state.has_gpu)
    detail = "; ".join(
        f"{name} excluded {cnt} node{'s' if cnt != 1 else ''}" for name, cnt in failed
    )
    msg = f"No node of {n} can host {_describe(request)} now: {detail or 'the cluster is empty'}."
    if slice_ is not None:
        msg += f" The largest GPU slice free on a suitable node is {slice_[0]}m / {slice_[1]} MiB."
    return Unplaced(request.request_id, reason, msg, tuple(failed), slice_)
