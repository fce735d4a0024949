"""hami-bind: take HAMi's node lock with compare-and-swap, bind the pod, release a stale lock.

HAMi's device plugin finds the pod to allocate for through `hami.io/mutex.lock` on the node
(spec section 1.3, step 3.1), so holding it while binding makes `GetPendingPod` pick exactly our
pod. The plugin releases the lock after Allocate; we release it only when our pod goes away first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.hami import format_node_lock, parse_node_lock
from scheduling.backends.kubernetes.interface import ClusterApiError, ClusterGateway, Kind

logger = logging.getLogger(__name__)


class NodeLockBusy(ClusterApiError):
    """Another live pod holds the node lock; retry later (transient)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=409, reason="NodeLocked")


def acquire_node_lock(
    gateway: ClusterGateway,
    node_name: str,
    namespace: str,
    pod_name: str,
    *,
    now: Callable[[], datetime],
    max_attempts: int = 5,
) -> None:
    """Write our lock on the node, retrying on resourceVersion conflicts.

    An existing lock is taken over when it is ours, expired (5 min), or its owner pod no longer
    exists (HAMi's own rules); otherwise NodeLockBusy. Raises ClusterApiError (404) when the node
    does not exist (permanent) or after `max_attempts` conflicts (transient).
    """
    for _ in range(max_attempts):
        node = gateway.get_node(node_name)
        if node is None:
            raise ClusterApiError(f'node "{node_name}" not found', status=404, permanent=True)
        annotations = node.get("metadata", {}).get("annotations") or {}
        current = annotations.get(c.HAMI_NODE_LOCK)
        if current:
            lock = parse_node_lock(current)
            if lock.is_owned_by(namespace, pod_name):
                return
            stamp = now()
            owner_alive = gateway.get(Kind.POD, lock.namespace, lock.pod_name) is not None
            if owner_alive and not lock.is_expired(stamp, c.HAMI_NODE_LOCK_EXPIRE_SECONDS):
                raise NodeLockBusy(
                    f"node {node_name} is locked by {lock.namespace}/{lock.pod_name} "
                    f"since {lock.taken_at}"
                )
            logger.info("taking over stale HAMi lock on %s: %s", node_name, current)
        value = format_node_lock(now(), namespace, pod_name)
        try:
            gateway.cas_patch_node_annotations(
                node_name, {c.HAMI_NODE_LOCK: value}, node["metadata"]["resourceVersion"]
            )
            return
        except ClusterApiError as exc:
            if not exc.is_conflict:
                raise
            logger.info("node %s changed while locking; retrying", node_name)
    raise ClusterApiError(
        f"node {node_name}: lock not taken after {max_attempts} conflicting attempts", status=409
    )


def release_node_lock(
    gateway: ClusterGateway, node_name: str, namespace: str, pod_name: str, *, max_attempts: int = 5
) -> bool:
    """Remove the node lock if (and only if) our pod holds it; True when removed."""
    for _ in range(max_attempts):
        node = gateway.get_node(node_name)
        if node is None:
            return False
        current = (node.get("metadata", {}).get("annotations") or {}).get(c.HAMI_NODE_LOCK)
        if not current or not parse_node_lock(current).is_owned_by(namespace, pod_name):
            return False
        try:
            gateway.cas_patch_node_annotations(
                node_name, {c.HAMI_NODE_LOCK: None}, node["metadata"]["resourceVersion"]
            )
            return True
        except ClusterApiError as exc:
            if not exc.is_conflict:
                raise
    raise ClusterApiError(f"node {node_name}: lock release kept conflicting", status=409)


def bind_with_lock(
    gateway: ClusterGateway,
    namespace: str,
    pod_name: str,
    node_name: str,
    *,
    now: Callable[[], datetime],
) -> None:
    """Lock the node, then POST the Binding. Idempotent: a pod already bound to this node is
    fine; bound elsewhere is a permanent error. The lock is released if binding fails."""
    pod = gateway.get(Kind.POD, namespace, pod_name)
    if pod is None:
        raise ClusterApiError(f'pod "{pod_name}" vanished before binding', status=404)
    bound_to = (pod.get("spec") or {}).get("nodeName")
    if bound_to:
        _check_bound(pod_name, bound_to, node_name)
        return
    acquire_node_lock(gateway, node_name, namespace, pod_name, now=now)
    try:
        gateway.bind_pod(namespace, pod_name, node_name)
    except ClusterApiError as exc:
        if exc.is_conflict:  # bound meanwhile (a retried task): check where
            latest = gateway.get(Kind.POD, namespace, pod_name) or {}
            _check_bound(pod_name, str((latest.get("spec") or {}).get("nodeName", "")), node_name)
            return
        release_node_lock(gateway, node_name, namespace, pod_name)
        raise


def _check_bound(pod_name: str, bound_to: str, wanted: str) -> None:
    if bound_to != wanted:
        raise ClusterApiError(
            f"pod {pod_name} is bound to {bound_to or 'nothing'}, not {wanted}", permanent=True
        )
