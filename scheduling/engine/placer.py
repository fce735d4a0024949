"""One placement decision: filter → soft preferences → policy → GPUs → apply."""

from __future__ import annotations

import numpy as np

from .filters import feasible_mask, preferred_subset
from .gpu_select import make_assignment
from .policies.base import CachedNodeScorer, IntArray, Policy
from .state import ClusterState
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


def place_one(
    state: ClusterState, request: PlacementRequest, policy: Policy, prio: IntArray | None = None
) -> Assignment | None:
    """Place one (valid) request now and apply it to ``state``.

    Args:
        state: the cluster; mutated when the request is placed.
        request: the request (checked with :func:`.filters.validate` beforehand).
        policy: the policy that scores the feasible nodes.
        prio: node tie-break priorities (lower wins); default: node order.

    Returns:
        The applied assignment, or ``None`` when no node is feasible (state unchanged).
    """
    cand = np.flatnonzero(feasible_mask(state, request))
    if cand.size == 0:
        return None
    cand = preferred_subset(state, request, cand)
    if prio is None:
        prio = np.arange(len(state), dtype=np.int64)
    if cand.size > 1 and node_local(policy):
        cand = representatives(state, cand, prio)
    i, gpus = policy.choose(state, request, cand, prio)
    assignment = make_assignment(state, i, request, gpus)
    state.apply(assignment)
    return assignment
