"""Pod status → ObservedPhase, and a resumable watch that keeps a cache of managed pods.

`PodTracker.refresh()` lists once (no resourceVersion yet), then only watches from the last
resourceVersion it saw. A 410 Gone makes it relist; transient errors are retried with exponential
backoff. A pod that disappears (DELETED event, or absent from a relist) reports MISSING.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from scheduling.backends.base import ObservedPhase, StatusReport
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.interface import (
    ClusterApiError,
    ClusterGateway,
    JsonDict,
    WatchEvent,
    WatchExpired,
)

logger = logging.getLogger(__name__)

# Container waiting reasons that will not resolve by waiting.
_FATAL_WAITING_REASONS = frozenset(
    {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}
)


def pod_workload_id(pod: JsonDict) -> int | None:
    """The Tessera workload id a pod carries in its labels, None for foreign pods."""
    raw = (pod.get("metadata", {}).get("labels") or {}).get(c.WORKLOAD_ID_LABEL)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def pod_report(workload_id: int, pod: JsonDict | None) -> StatusReport:
    """Map a pod (None = no pod) to a StatusReport.

    - no pod → MISSING;
    - phase Succeeded / Failed → SUCCEEDED / FAILED (message: status reason/message, e.g. HAMi's
      UnexpectedAdmissionError);
    - HAMi `bind-phase=failed` → FAILED (the device plugin refused the allocation);
    - Running with every container ready → RUNNING, otherwise PENDING with the waiting reason;
    - Pending → PENDING (message: why it is not scheduled / not started), unless a container waits
      for a reason that never resolves (invalid image, bad config) → FAILED.
    """
    if pod is None:
        return StatusReport(workload_id, ObservedPhase.MISSING, "no pod in the cluster")
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    node = str(spec.get("nodeName") or "")
    phase = status.get("phase", "Pending")
    annotations = pod.get("metadata", {}).get("annotations") or {}
    detail = _status_detail(status)
    if phase == "Succeeded":
        return StatusReport(workload_id, ObservedPhase.SUCCEEDED, detail, node)
    if phase == "Failed":
        return StatusReport(workload_id, ObservedPhase.FAILED, detail or "pod failed", node)
    if annotations.get(c.HAMI_BIND_PHASE) == "failed":
        return StatusReport(
            workload_id, ObservedPhase.FAILED, "HAMi device allocation failed (bind-phase)", node
        )
    waiting = _waiting_reasons(status)
    fatal = [reason for reason in waiting if reason.split(":")[0] in _FATAL_WAITING_REASONS]
    if fatal:
        return StatusReport(workload_id, ObservedPhase.FAILED, "; ".join(fatal), node)
    if phase == "Running":
        if _condition(status, "Ready") == "True" or not waiting:
            return StatusReport(workload_id, ObservedPhase.RUNNING, "", node)
        return StatusReport(workload_id, ObservedPhase.RUNNING, "; ".join(waiting), node)
    message = "; ".join(waiting) or detail or _unscheduled_message(status)
    return StatusReport(workload_id, ObservedPhase.PENDING, message, node)


def _status_detail(status: JsonDict) -> str:
    parts = [str(status.get(k)) for k in ("reason", "message") if status.get(k)]
    return ": ".join(parts)


def _condition(status: JsonDict, kind: str) -> str:
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status", ""))
    return ""


def _unscheduled_message(status: JsonDict) -> str:
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return ": ".join(str(cond[k]) for k in ("reason", "message") if cond.get(k))
    return ""


def _waiting_reasons(status: JsonDict) -> list[str]:
    reasons = []
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            text = str(waiting["reason"])
            if waiting.get("message"):
                text += f": {waiting['message']}"
            reasons.append(text)
    return reasons


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: base × 2^attempt, capped."""

    base_seconds: float = 0.5
    cap_seconds: float = 30.0

    def delay(self, attempt: int) -> float:
        return float(min(self.cap_seconds, self.base_seconds * (2**attempt)))


class PodTracker:
    """A cache of the managed pods of one namespace, kept current by list + resumable watch."""

    def __init__(
        self,
        gateway: ClusterGateway,
        namespace: str,
        *,
        label_selector: str = c.MANAGED_SELECTOR,
        watch_timeout_seconds: int = 5,
        max_attempts: int = 5,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.gateway = gateway
        self.namespace = namespace
        self.label_selector = label_selector
        self.watch_timeout_seconds = watch_timeout_seconds
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self.resource_version: str = ""
        self.relists = 0
        self._pods: dict[int, JsonDict] = {}

    def pod(self, workload_id: int) -> JsonDict | None:
        """The cached pod of a workload (call `refresh` first)."""
        return self._pods.get(workload_id)

    def forget(self, workload_id: int) -> None:
        """Drop a workload from the cache (after Tessera deleted its pod)."""
        self._pods.pop(workload_id, None)

    def refresh(self) -> list[StatusReport]:
        """Bring the cache up to date; returns a report for every workload whose pod changed.

        Raises ClusterApiError when the cluster stays unreachable for `max_attempts` tries, or at
        once for a permanent error (e.g. 403: RBAC is wrong)."""
        last_error: ClusterApiError | None = None
        for attempt in range(self.max_attempts):
            try:
                if not self.resource_version:
                    return self._relist()
                return self._watch()
            except WatchExpired:
                logger.info("pod watch in %s expired (410 Gone); relisting", self.namespace)
                self.resource_version = ""
            except ClusterApiError as exc:
                if exc.permanent:
                    raise
                last_error = exc
                delay = self.backoff.delay(attempt)
                logger.warning("pod watch in %s: %s; retrying in %.1fs", self.namespace, exc, delay)
                self.sleep(delay)
        raise ClusterApiError(
            f"pod status in {self.namespace}: gave up after {self.max_attempts} attempts"
            + (f" ({last_error.message})" if last_error else ""),
            status=last_error.status if last_error else None,
        )

    def run(
        self, on_change: Callable[[StatusReport], None], should_stop: Callable[[], bool]
    ) -> None:
        """Watch until `should_stop()`; call `on_change` for each changed workload. For a
        long-running process (e.g. a management command), resuming after every server timeout."""
        while not should_stop():
            for report in self.refresh():
                on_change(report)

    def _relist(self) -> list[StatusReport]:
        items, resource_version = self.gateway.list_pods(self.namespace, self.label_selector)
        self.relists += 1
        fresh: dict[int, JsonDict] = {}
        for pod in items:
            workload_id = pod_workload_id(pod)
            if workload_id is not None:
                fresh[workload_id] = pod
        changed = [
            wid
            for wid in sorted(set(fresh) | set(self._pods))
            if _version(fresh.get(wid)) != _version(self._pods.get(wid))
        ]
        self._pods = fresh
        self.resource_version = resource_version
        return [pod_report(wid, fresh.get(wid)) for wid in changed]

    def _watch(self) -> list[StatusReport]:
        events: Iterable[WatchEvent] = self.gateway.watch_pods(
            self.namespace, self.label_selector, self.resource_version, self.watch_timeout_seconds
        )
        changed: dict[int, JsonDict | None] = {}
        for event in events:
            if event.resource_version:
                self.resource_version = event.resource_version
            workload_id = pod_workload_id(event.object)
            if event.type == "BOOKMARK" or workload_id is None:
                continue
            if event.type == "DELETED":
                self._pods.pop(workload_id, None)
                changed[workload_id] = None
            else:
                self._pods[workload_id] = event.object
                changed[workload_id] = event.object
        return [pod_report(wid, pod) for wid, pod in sorted(changed.items())]


def _version(pod: JsonDict | None) -> str:
    return "" if pod is None else str(pod.get("metadata", {}).get("resourceVersion", ""))
