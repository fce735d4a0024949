"""The scheduling app's rows as quotas counts them (quotas.cluster.ClusterRows), installed at app ready."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import QuerySet

from scheduling.choices import ACTIVE_STATES, WorkloadState
from scheduling.models import Node, Reservation, Workload


class SchedulingRows:
    """Nodes, reservations and workloads from the scheduling tables."""

    active_states: frozenset[str] = frozenset(ACTIVE_STATES)

    def nodes(self) -> QuerySet[Any]:
        return Node.objects.all()

    def reservations(self, node_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
        return {
            r.node_id: (int(r.cpu_milli), int(r.memory_mib))
            for r in Reservation.objects.filter(node__in=list(node_ids))
        }

    def charged_workloads(self, group_id: int) -> QuerySet[Any]:
        return (
            Workload.objects.filter(
                quota__group_id=group_id, state__in=[WorkloadState.PENDING, *ACTIVE_STATES]
            )
            .select_related("gang")
            .order_by("id")
        )
