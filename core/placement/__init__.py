"""Tessera's pure placement engine: cluster state arrays, requests, policies, gangs, explanations.

Imports only numpy and the standard library; no clock, environment, I/O or global randomness.
"""

from .explain import explain
from .filters import feasible_mask, validate
from .fragmentation import FragModel, typical_pods
from .placer import place_one
from .planner import order_requests, plan_placements, queue_key
from .policies import POLICIES, Policy, PolicyFactory
from .state import ClusterState
from .types import (
    GPU_MILLI,
    Assignment,
    GangSpec,
    GangTopology,
    GpuSpec,
    NodeSpec,
    PlacementPlan,
    PlacementRequest,
    ReservationPolicy,
    TopologyLevel,
    TopologyMode,
    TopologyPolicy,
    TypicalPod,
    Unplaced,
    UnplacedReason,
)

__all__ = [
    "GPU_MILLI",
    "POLICIES",
    "Assignment",
    "ClusterState",
    "FragModel",
    "GangSpec",
    "GangTopology",
    "GpuSpec",
    "NodeSpec",
    "PlacementPlan",
    "PlacementRequest",
    "Policy",
    "PolicyFactory",
    "ReservationPolicy",
    "TopologyLevel",
    "TopologyMode",
    "TopologyPolicy",
    "TypicalPod",
    "Unplaced",
    "UnplacedReason",
    "explain",
    "feasible_mask",
    "order_requests",
    "place_one",
    "plan_placements",
    "queue_key",
    "typical_pods",
    "validate",
]
