"""Operator actions on the inventory: cordon/uncordon, drain, GPU health, and simulated failures.

Each one is a transaction that bumps the shards whose nodes it touched (so cached snapshots are rebuilt)
and triggers their cycles; workloads that must move are requeued (never deleted: a codespace's observer
stops it, a job pod waits for capacity again).
"""

from __future__ import annotations

import logging

from django.db import transaction

from portal.errors import InvalidInput, NotFoundError
from portal.transactions import retry_transaction
from scheduling.backends.registry import get_backend
from scheduling.limits import MAX_REASON_LENGTH
from scheduling.lock_objects import lock_shards
from scheduling.models import Gpu, Node, Placement
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


def _workloads_on(*, node_id: int | None = None, gpu_id: int | None = None) -> list[int]:
    qs = Placement.objects.filter(released_at__isnull=True)
    if node_id is not None:
        qs = qs.filter(node_id=node_id)
    if gpu_id is not None:
        qs = qs.filter(gpu_shares__gpu_id=gpu_id)
    return sorted(set(qs.values_list("workload_id", flat=True)))


@retry_transaction
def cordon_node(node_id: int) -> Node:
    """Take no new work on the node (what runs there stays). Idempotent."""
    with transaction.atomic():
        node = _node(node_id)
        _lock_for(node)
        if not node.cordoned:
            Node.objects.filter(pk=node.pk).update(cordoned=True)
            _touch(node)
    return _node(node_id)


@retry_transaction
def uncordon_node(node_id: int) -> Node:
    """Accept new work on the node again. Idempotent."""
    with transaction.atomic():
        node = _node(node_id)
        _lock_for(node)
        if node.cordoned:
            Node.objects.filter(pk=node.pk).update(cordoned=False)
            _touch(node)
    return _node(node_id)


def _check_reason(reason: str) -> None:
    if len(reason) > MAX_REASON_LENGTH:
        message = f"At most {MAX_REASON_LENGTH} characters (got {len(reason)})."
        raise InvalidInput(f"reason: {message}", fields={"reason": [message]})


@retry_transaction
def drain_node(node_id: int, *, reason: str = "") -> list[int]:
    """Cordon the node and requeue every workload on it (their pending reason: `reason`, at most
    MAX_REASON_LENGTH characters, else InvalidInput). Returns the requeued workload ids."""
    _check_reason(reason)
    with transaction.atomic():
        _lock_for(_node(node_id))
        node = cordon_node(node_id)
        ids = _workloads_on(node_id=node.pk)
        why = reason or f"Requeued: node {node.name} is being drained by an operator."
        requeued = requeue_workloads(ids, reason=why, code="drained")
    logger.info("drained node %s: requeued %s", node.name, requeued)
    return requeued


@retry_transaction
def set_gpu_health(gpu_id: int, *, healthy: bool, reason: str = "") -> list[int]:
    """Mark a GPU healthy or unhealthy. An unhealthy GPU takes no new work and the workloads on it are
    requeued (exactly those). Returns the requeued workload ids."""
    with transaction.atomic():
        gpu = _gpu(gpu_id)
        _lock_for(gpu.node)
        requeued: list[int] = []
        if gpu.healthy != healthy:
            Gpu.objects.filter(pk=gpu.pk).update(healthy=healthy)
            _touch(gpu.node)
        if not healthy:
            why = (
                reason or f"Requeued: GPU {gpu.index} of node {gpu.node.name} was marked unhealthy."
            )
            requeued = requeue_workloads(
                _workloads_on(gpu_id=gpu.pk), reason=why, code="gpu_unhealthy"
            )
    return requeued


@retry_transaction
def set_node_health(node_id: int, *, healthy: bool, reason: str = "") -> list[int]:
    """Mark a node healthy or unhealthy (an unhealthy node's workloads are requeued)."""
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
                _workloads_on(node_id=node.pk), reason=why, code="node_failed"
            )
    return requeued


@retry_transaction
def fail_gpu(gpu_id: int) -> list[int]:
    """Simulate the failure of a GPU: its simulated pods fail, and exactly the workloads that were on it
    are requeued; the GPU stays unhealthy until an operator marks it healthy."""
    gpu = _gpu(gpu_id)
    why = f"GPU {gpu.index} ({gpu.uuid}) of node {gpu.node.name} failed; requeued."
    with transaction.atomic():
        _lock_for(gpu.node)
        ids = _workloads_on(gpu_id=gpu.pk)
        backend = get_backend()
        if hasattr(backend, "fail_pods"):
            backend.fail_pods(ids, why)
        return set_gpu_health(gpu.pk, healthy=False, reason=why)


@retry_transaction
def fail_node(node_id: int) -> list[int]:
    """Simulate the failure of a whole node: its pods fail and its workloads are requeued."""
    node = _node(node_id)
    why = f"Node {node.name} failed; requeued."
    with transaction.atomic():
        _lock_for(node)
        ids = _workloads_on(node_id=node.pk)
        backend = get_backend()
        if hasattr(backend, "fail_pods"):
            backend.fail_pods(ids, why)
        return set_node_health(node.pk, healthy=False, reason=why)
