"""The cluster rows quotas count: nodes (with their GPUs and reservations) and the workloads charged to
quotas.

The scheduling app owns those models and sits above quotas in the layers `.importlinter` enforces, so
quotas never imports it: scheduling hands its rows over at app ready (`scheduling.apps.SchedulingConfig.ready`
installs `scheduling.quota_rows.SchedulingRows`). `quotas.usage` reads the cluster through `cluster_rows()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.db.models import QuerySet

from quotas.fairness import UsageHour


class ClusterRows(Protocol):
    """What quotas reads of the cluster."""

    active_states: frozenset[str]
    """Workload states that hold resources (placed, running): they count as used, the rest as pending."""

    def nodes(self) -> QuerySet[Any]:
        """Every node row (name, labels, cordoned, healthy, cpu_milli, memory_mib; GPUs as `gpus`)."""
        ...

    def reservations(self, node_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
        """Of the nodes `node_ids`, those with a reservation row: node id -> (CPU milli, memory MiB) kept
        for GPU work."""
        ...

    def charged_workloads(self, group_id: int) -> QuerySet[Any]:
        """The pending and active workloads of the group's quotas, their gang selected, by id."""
        ...

    def gpu_usage_hours(self, group_id: int, since: datetime, until: datetime) -> list[UsageHour]:
        """GPU-hours the group's quotas held per hour and GPU model in [since, until) (recorded usage:
        the telemetry's hour rows, and its minute rows for the hour not rolled up yet)."""
        ...

    def gpu_hour_prices(self) -> dict[str, float]:
        """Price per GPU-hour per lower-case model name, "default" for the others."""
        ...


_installed: list[ClusterRows] = []


def install(rows: ClusterRows) -> None:
    """Make `rows` the cluster quotas counts (the scheduling app calls this when it is ready)."""
    _installed[:] = [rows]


def cluster_rows() -> ClusterRows:
    """The installed cluster rows; ImproperlyConfigured when no app installed them."""
    if not _installed:
        raise ImproperlyConfigured(
            "quotas.cluster: no cluster rows installed; add the scheduling app to INSTALLED_APPS."
        )
    return _installed[0]
