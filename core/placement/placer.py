"""One placement decision: filter → soft preferences → policy → GPUs → apply."""

from __future__ import annotations

import dataclasses

import numpy as np

from .filters import feasible_mask, preferred_subset
from .gpu_select import make_assignment
from .policies.base import CachedNodeScorer, IntArray, Policy
from .state import BoolArray, ClusterState
from .types import Assignment, PlacementRequest


def node_local(policy: Policy) -> bool:
    """True when the policy scores a node from that node's own row only and breaks ties by priority:
    the :class:`CachedNodeScorer` family (FGD, Tessera) without a dynamic score term."""
    return (
        isinstance(policy, CachedNodeScorer)
        and type(policy).dynamic_term is CachedNodeScorer.dynamic_term
    )


def representatives(state: ClusterState, cand: IntArray, prio: IntArray) -> IntArray:
    """One node per class of identical rows (:attr:`ClusterState.row_class`) among ``cand``: the one with
    the lowest priority (then lowest index), in ascending index order.

    A node-local policy gives identical rows identical scores, so the node it picks among the
    representatives is the node it would pick among all candidates (highest score, then lowest priority,
    then first in index order); on a large, mostly idle cluster this shrinks thousands of candidates to
    the few distinct node states.
    """
    cls = state.row_class[cand]
    order = np.lexsort((cand, prio[cand], cls))
    s = cls[order]
    first = np.empty(s.size, np.bool_)
    first[0] = True
    np.not_equal(s[1:], s[:-1], out=first[1:])
    out: IntArray = np.sort(cand[order[first]])
    return out


def _slice_finalists(
    state: ClusterState, request: PlacementRequest, policy: Policy, cand: IntArray, prio: IntArray
) -> IntArray:
    """For a slice with a GPU-memory request: the best node where the memory bound excludes no GPU,
    and the best node where it does, as the candidates of the final choice.

    On a node where every healthy GPU with enough free milli also has enough free memory, a node-local
    policy scores the slice exactly as it scores the same slice without a memory request, which it can
    cache per node state; only the other nodes need the per-node evaluation with the memory bound. The
    winner among all candidates is the better of the two groups' winners (highest score, then priority).
    """
    rows = state.gpu_ok[cand] & (state.gpu_free[cand] >= request.gpu_milli)
    binding = (rows & (state.gpu_mem_free[cand] < request.gpu_memory_mib)).any(axis=1)
    free_nodes = cand[~binding]
    bound_nodes = cand[binding]
    if free_nodes.size == 0 or (free_nodes.size == 1 and bound_nodes.size <= 1):
        return cand
    plain = dataclasses.replace(request, gpu_memory_mib=0)
    best = [policy.choose(state, plain, free_nodes, prio)[0]]
    if bound_nodes.size:
        best.append(policy.choose(state, request, bound_nodes, prio)[0])
    out: IntArray = np.array(sorted(best), np.int64)
    return out


def place_one(
    state: ClusterState,
    request: PlacementRequest,
    policy: Policy,
    prio: IntArray | None = None,
    allowed: BoolArray | None = None,
) -> Assignment | None:
    """Place one (valid) request now and apply it to ``state``.

    Args:
        state: the cluster; mutated when the request is placed.
        request: the request (checked with :func:`.filters.validate` beforehand).
        policy: the policy that scores the feasible nodes.
        prio: node tie-break priorities (lower wins); default: node order.
        allowed: the nodes it may go to (a topology domain); default: all.

    Returns:
        The applied assignment, or ``None`` when no node is feasible (state unchanged).
    """
    mask = feasible_mask(state, request)
    if allowed is not None:
        mask &= allowed
    cand = mask.nonzero()[0]  # ``np.flatnonzero`` without its wrapper (a 1-D mask)
    if cand.size == 0:
        return None
    sub = preferred_subset(state, request, cand)
    # ``mask`` stays the boolean form of the candidates unless the preferences narrowed them.
    exact_mask: BoolArray | None = mask if sub is cand else None
    cand = sub
    if prio is None:
        prio = np.arange(len(state), dtype=np.int64)
    if cand.size > 1 and node_local(policy):
        memory_slice = (
            request.gpu_memory_mib > 0 and request.gpu_count == 1 and not request.is_whole_gpu
        )
        if memory_slice or not getattr(policy, "batch_scoring", False):
            # A policy scoring node by node gains from seeing one node per class; one that scores its
            # stale nodes in one vectorised pass (deduplicated by class) is faster on every candidate,
            # which spares this sort (the choice is the same either way, see :func:`representatives`).
            cand = representatives(state, cand, prio)
            exact_mask = None
        if memory_slice:
            cand = _slice_finalists(state, request, policy, cand, prio)
        assert isinstance(policy, CachedNodeScorer)
        i, gpus = policy.choose(state, request, cand, prio, mask=exact_mask)
    else:
        i, gpus = policy.choose(state, request, cand, prio)
    assignment = make_assignment(state, i, request, gpus)
    state.apply(assignment)
    return assignment
