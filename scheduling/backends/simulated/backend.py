"""The simulated backend: a cluster that exists only in the database.

`materialize` creates a SimulatedPod row (create-or-get by workload id, so it is idempotent) that reports
RUNNING once `TESSERA_SIM_START_DELAY_SECONDS` have passed; `release` deletes it; `sync_inventory` reads
`TESSERA_SIM_INVENTORY` (the bundled demo cluster, a JSON inventory or an openb node CSV). Failures of a
GPU or a node are injected by `scheduling.services.fail_gpu` / `fail_node`, which mark the pods FAILED.
Synthetic GPU utilization comes from `scheduling.telemetry.synthetic`, not from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from scheduling.backends.base import (
    MaterializeRequest,
    NodeInventory,
    ObservedPhase,
    StatusReport,
)
from scheduling.inventory import load_configured_inventory


class SimulatedBackend:
    """Backend protocol over SimulatedPod rows (shared by every worker process)."""

    name = "simulated"

    def materialize(self, request: MaterializeRequest) -> None:
        from scheduling.models import SimulatedPod

        delay = float(settings.TESSERA_SIM_START_DELAY_SECONDS)
        SimulatedPod.objects.get_or_create(
            workload_id=request.workload_id,
            defaults={
                "name": request.name,
                "node_name": request.node_name,
                "gpu_uuids": [g.uuid for g in request.gpus],
                "running_after": timezone.now() + timedelta(seconds=delay),
            },
        )

    def release(
        self, workload_id: int, name: str, *, delete_home: bool, home_name: str = ""
    ) -> None:
        from scheduling.models import SimulatedPod

        SimulatedPod.objects.filter(workload_id=workload_id).delete()

    def sync_status(self, workload_ids: Iterable[int]) -> Sequence[StatusReport]:
        from scheduling.models import SimulatedPod

        ids = list(workload_ids)
        now = timezone.now()
        pods = {p.workload_id: p for p in SimulatedPod.objects.filter(workload_id__in=ids)}
        reports = []
        for wid in ids:
            pod = pods.get(wid)
            if pod is None:
                reports.append(StatusReport(wid, ObservedPhase.MISSING, "no simulated pod"))
            elif pod.failed:
                reports.append(StatusReport(wid, ObservedPhase.FAILED, pod.message, pod.node_name))
            elif pod.running_after <= now:
                reports.append(StatusReport(wid, ObservedPhase.RUNNING, "", pod.node_name))
            else:
                reports.append(StatusReport(wid, ObservedPhase.PENDING, "starting", pod.node_name))
        return reports

    def sync_inventory(self) -> Sequence[NodeInventory]:
        return load_configured_inventory(settings.TESSERA_SIM_INVENTORY)

    def fail_pods(self, workload_ids: Iterable[int], message: str) -> int:
        """Mark simulated pods FAILED (a GPU or node failure). Returns how many."""
        from scheduling.models import SimulatedPod

        return SimulatedPod.objects.filter(workload_id__in=list(workload_ids)).update(
            failed=True, message=message
        )
