"""The scheduling service: the functions other apps call (docs/services.md, "scheduling").

Submodules: `workloads` (submit, release, gangs, requeue), `cycle` (one scheduling cycle per shard:
read, decide, apply), `decide` (the cycle's pure decision), `snapshot` (engine snapshots cached per
worker), `preview` (what-if), `operator` (cordon, drain, health, simulated failures), `slicing` (where a
slice may go), `charge` (what a whole card is charged), `reconcile` (beat reconcilers), `quota_bridge`
(the cycle's quota snapshot, capacity cached).
"""

from scheduling.services.cycle import CycleReport, run_cycle
from scheduling.services.operator import (
    cordon_node,
    drain_node,
    fail_gpu,
    fail_node,
    set_gpu_health,
    set_node_health,
    uncordon_node,
)
from scheduling.services.preview import Preview, largest_free_slice, preview_request
from scheduling.services.slicing import models_for_slice, whole_card_only_models
from scheduling.services.snapshot import GroupCluster, snapshot_for_group
from scheduling.services.workloads import (
    backend_name,
    cancel_gang,
    expire_gangs,
    fail_workloads,
    release_workload,
    requeue_each,
    requeue_workloads,
    submit_gang,
    submit_workload,
    trigger_cycle,
)

__all__ = [
    "CycleReport",
    "GroupCluster",
    "Preview",
    "backend_name",
    "cancel_gang",
    "cordon_node",
    "drain_node",
    "expire_gangs",
    "fail_gpu",
    "fail_node",
    "fail_workloads",
    "largest_free_slice",
    "models_for_slice",
    "preview_request",
    "release_workload",
    "requeue_each",
    "requeue_workloads",
    "run_cycle",
    "set_gpu_health",
    "set_node_health",
    "snapshot_for_group",
    "submit_gang",
    "submit_workload",
    "trigger_cycle",
    "uncordon_node",
    "whole_card_only_models",
]
