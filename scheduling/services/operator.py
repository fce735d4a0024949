"""Operator actions on the inventory: cordon/uncordon, drain, GPU health, and simulated failures.

Each one is a transaction that checks the reason (`portal.operator_log.clean_reason`: required for
cordon, drain and marking a GPU unhealthy), computes its impact with the function its confirmation
uses (`operator_impact`), writes one audit row (`portal.OperatorAction`, with the workloads it
requeued), bumps the shards whose nodes it touched (so cached snapshots are rebuilt)
and triggers their cycles; workloads that must move are requeued (never deleted: a codespace's observer
stops it, a job pod waits for capacity again).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from portal.choices import OperatorActionKind as Kind
from portal.choices import OperatorTargetKind
from portal.errors import NotFoundError
from portal.operator_log import ActionImpact, clean_reason, record_operator_action
from portal.transactions import retry_transaction
from scheduling.backends.registry import get_backend
from scheduling.lock_objects import lock_shards
from scheduling.models import Gpu, Node, Placement
from scheduling.services.operator_impact import gpu_action_impact, node_action_impact, workloads_on
from scheduling.services.snapshot import bump_shards_for_nodes, groups_for_nodes
from scheduling.services.workloads import requeue_workloads, trigger_cycle

logger = logging.getLogger(__name__)


def _node(node_id: int) -> Node:
    node = Node.objects.filter(pk=node_id).first()
    if node is None:
        raise NotFoundError(f"Node {node_id} does not exist.")
    return node


def _gpu(gpu_id: int) -> Gpu:
    gpu = Gpu.objects.select_related("node").filter(pk=gpu_id).first()
    if gpu is None:
        raise NotFoundError(f"GPU {gpu_id} does not exist.")
    return gpu


def _lock_for(node: Node) -> None:
    """Take the advisory locks of every shard the node belongs to and of every shard whose workloads
    run on it (a relabelled node keeps its old group's work until requeued), all at once and in
    ascending id, before any row is written (docs/adr/0002: shards first; taking a lower id later,
    in requeue_workloads, could deadlock with a cycle), so an operator action never deadlocks."""
    running = Placement.objects.filter(node_id=node.pk, released_at__isnull=True).values_list(
        "workload__quota__group_id", flat=True
    )
    lock_shards({*groups_for_nodes([node.labels]), *running})


def _touch(node: Node) -> None:
    bump_shards_for_nodes([node.pk])
    for gid in groups_for_nodes([node.labels]):
        trigger_cycle(gid)


def _record_node(node: Node, action: str, impact: ActionImpact, *, actor: Any, reason: str) -> None:
    record_operator_action(
        actor=actor,
        action=action,
        target_kind=OperatorTargetKind.NODE,
        target_id=node.pk,
        target_name=node.name,
        node_name=node.name,
        impact=impact,
        reason=reason,
    )


def _record_gpu(gpu: Gpu, action: str, impact: ActionImpact, *, actor: Any, reason: str) -> None:
    record_operator_action(
        actor=actor,
        action=action,
        target_kind=OperatorTargetKind.GPU,
        target_id=gpu.pk,
        target_name=f"GPU {gpu.index} of {gpu.node.name}",
        node_name=gpu.node.name,
        impact=impact,
        reason=reason,
    )


def _set_cordoned(node: Node, cordoned: bool) -> None:
    if node.cordoned != cordoned:
        Node.objects.filter(pk=node.pk).update(cordoned=cordoned)
        _touch(node)


@retry_transaction
def cordon_node(node_id: int, *, reason: str, actor: Any = None) -> Node:
    """Take no new work on the node (what runs there stays); `reason` is required. Idempotent: the
    node stays cordoned; each call is one audit row."""
    reason = clean_reason(reason, required=True)
    with transaction.atomic():
        node = _node(node_id)
        _lock_for(node)
        impact = node_action_impact(node, Kind.CORDON)
        _set_cordoned(node, True)
        _record_node(node, Kind.CORDON, impact, actor=actor, reason=reason)
    return _node(node_id)


@retry_transaction
def uncordon_node(node_id: int, *, reason: str = "", actor: Any = None) -> Node:
    """Accept new work on the node again. Idempotent."""
    reason = clean_reason(reason, required=False)
    with transaction.atomic():
        node = _node(node_id)
        _lock_for(node)
        impact = node_action_impact(node, Kind.UNCORDON)
        _set_cordoned(node, False)
        _record_node(node, Kind.UNCORDON, impact, actor=actor, reason=reason)
    return _node(node_id)


@retry_transaction
def drain_node(node_id: int, *, reason: str, actor: Any = None) -> list[int]:
    """Cordon the node and requeue every workload on it (with their gangs); their pending reason is
    `reason` (required, trimmed, at most MAX_REASON_LENGTH characters, else InvalidInput naming it).
    Returns the requeued workload ids."""
    reason = clean_reason(reason, required=True)
    with transaction.atomic():
        node = _node(node_id)
        _lock_for(node)
        impact = node_action_impact(node, Kind.DRAIN)
        _set_cordoned(node, True)
        requeued = requeue_workloads(workloads_on(node_id=node.pk), reason=reason, code="drained")
        _record_node(node, Kind.DRAIN, impact, actor=actor, reason=reason)
    logger.info("drained node %s: requeued %s", node.name, requeued)
    return requeued


@retry_transaction
def set_gpu_health(gpu_id: int, *, healthy: bool, reason: str = "", actor: Any = None) -> list[int]:
    """Mark a GPU healthy or unhealthy (then `reason` is required). An unhealthy GPU takes no new work
    and the workloads on it are requeued (exactly those, with their gangs). Returns the requeued
    workload ids."""
    reason = clean_reason(reason, required=not healthy)
    action = Kind.GPU_HEALTHY if healthy else Kind.GPU_UNHEALTHY
    with transaction.atomic():
        gpu = _gpu(gpu_id)
        _lock_for(gpu.node)
        impact = gpu_action_impact(gpu, action)
        requeued = _apply_gpu_health(gpu, healthy=healthy, reason=reason, code="gpu_unhealthy")
        _record_gpu(gpu, action, impact, actor=actor, reason=reason)
    return requeued


def _apply_gpu_health(gpu: Gpu, *, healthy: bool, reason: str, code: str) -> list[int]:
    if gpu.healthy != healthy:
        Gpu.objects.filter(pk=gpu.pk).update(healthy=healthy)
        _touch(gpu.node)
    if healthy:
        return []
    return requeue_workloads(workloads_on(gpu_id=gpu.pk), reason=reason, code=code)


@retry_transaction
def set_node_health(node_id: int, *, healthy: bool, reason: str = "") -> list[int]:
    """Mark a node healthy or unhealthy (an unhealthy node's workloads are requeued). Used by the
    inventory sync and simulated failures (which write their own audit row)."""
    with transaction.atomic():
        node = _node(node_id)
        _lock_for(node)
        requeued: list[int] = []
        if node.healthy != healthy:
            Node.objects.filter(pk=node.pk).update(healthy=healthy)
            _touch(node)
        if not healthy:
            why = reason or f"Requeued: node {node.name} failed."
            requeued = requeue_workloads(
                workloads_on(node_id=node.pk), reason=why, code="node_failed"
            )
    return requeued


@retry_transaction
def fail_gpu(gpu_id: int, *, reason: str = "", actor: Any = None) -> list[int]:
    """Simulate the failure of a GPU: its simulated pods fail, and exactly the workloads that were on it
    are requeued; the GPU stays unhealthy until an operator marks it healthy."""
    reason = clean_reason(reason, required=False)
    gpu = _gpu(gpu_id)
    why = reason or f"GPU {gpu.index} ({gpu.uuid}) of node {gpu.node.name} failed; requeued."
    with transaction.atomic():
        _lock_for(gpu.node)
        impact = gpu_action_impact(gpu, Kind.GPU_FAILURE)
        ids = workloads_on(gpu_id=gpu.pk)
        backend = get_backend()
        if hasattr(backend, "fail_pods"):
            backend.fail_pods(ids, why)
        requeued = _apply_gpu_health(gpu, healthy=False, reason=why, code="gpu_unhealthy")
        _record_gpu(gpu, Kind.GPU_FAILURE, impact, actor=actor, reason=reason)
    return requeued


@retry_transaction
def fail_node(node_id: int, *, reason: str = "", actor: Any = None) -> list[int]:
    """Simulate the failure of a whole node: its pods fail and its workloads are requeued."""
    reason = clean_reason(reason, required=False)
    node = _node(node_id)
    why = reason or f"Node {node.name} failed; requeued."
    with transaction.atomic():
        _lock_for(node)
        impact = node_action_impact(node, Kind.NODE_FAILURE)
        ids = workloads_on(node_id=node.pk)
        backend = get_backend()
        if hasattr(backend, "fail_pods"):
            backend.fail_pods(ids, why)
        requeued = set_node_health(node.pk, healthy=False, reason=why)
        _record_node(node, Kind.NODE_FAILURE, impact, actor=actor, reason=reason)
    return requeued
