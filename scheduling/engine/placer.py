"""One placement decision: filter → soft preferences → policy → GPUs → apply."""

from __future__ import annotations

import numpy as np

from .filters import feasible_mask, preferred_subset
from .gpu_select import make_assignment
from .policies.base import IntArray, Policy
from .state import ClusterState
from .types import Assignment, PlacementRequest


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
    i, gpus = policy.choose(state, request, cand, prio)
    assignment = make_assignment(state, i, request, gpus)
    state.apply(assignment)
    return assignment
