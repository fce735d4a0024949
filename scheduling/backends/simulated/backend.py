"""The simulated backend: a cluster that exists only in the database.

`materialize` creates a SimulatedPod row (create-or-get by workload id and placement, so it is
idempotent) that reports RUNNING once `TESSERA_SIM_START_DELAY_SECONDS` have passed; `release`
deletes the pod of the given placement; `signal_reclaim` records a polite-reclaim notice on it; `list_objects` lists every pod (the orphan reconciler);
`sync_inventory` reads `TESSERA_SIM_INVENTORY` (the bundled demo cluster, a JSON inventory or an
openb node CSV). A dynamic card's MIG reconfiguration (`apply_mig_layout`) is ready
`TESSERA_SIM_MIG_RECONFIGURE_SECONDS` after it was asked for, or fails for the GPU UUIDs listed in
`TESSERA_SIM_MIG_FAIL_GPUS` (a drill of the failure path). Failures of a GPU or a node are injected by `scheduling.services.fail_gpu` /
`fail_node`, which mark the pods FAILED. Synthetic GPU utilization comes from
`scheduling.telemetry.synthetic`, not from here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from scheduling.backends.base import (
    BackendError,
    BackendObject,
    MaterializeRequest,
    MigLayoutPhase,
    MigLayoutRequest,
    MigLayoutStatus,
    NodeInventory,
    ObservedPhase,
    StatusReport,
)
from scheduling.followups import BackendRelease
from scheduling.inventory import load_configured_inventory


class SimulatedBackend:
    """Backend protocol over SimulatedPod rows (shared by every worker process)."""

    name = "simulated"

    def materialize(self, request: MaterializeRequest) -> None:
        """Create-or-get the workload's pod for `request.placement_id`. A pod left by an earlier
        placement of the workload (its release has not run yet) becomes this placement's pod."""
        self.materialize_many([request])

    def materialize_many(self, requests: Sequence[MaterializeRequest]) -> dict[int, BackendError]:
        """`materialize` of many requests in one transaction: the pods that exist are read at once,
        the missing ones inserted in bulk (a pod another process made meanwhile is kept: create-or-get),
        a pod of an earlier placement taken over. Never refuses one (no errors)."""
        from scheduling.models import SimulatedPod

        running_after = timezone.now() + timedelta(
            seconds=float(settings.TESSERA_SIM_START_DELAY_SECONDS)
        )

        def fields(request: MaterializeRequest) -> dict[str, Any]:
            return {
                "placement_id": request.placement_id,
                "name": request.name,
                "node_name": request.node_name,
                "gpu_uuids": [g.uuid for g in request.gpus],
                "running_after": running_after,
                "failed": False,
                "message": "",
            }

        by_workload = {r.workload_id: r for r in requests}
        with transaction.atomic():
            existing = dict(
                SimulatedPod.objects.filter(workload_id__in=list(by_workload)).values_list(
                    "workload_id", "placement_id"
                )
            )
            for workload_id, placement_id in sorted(existing.items()):
                request = by_workload[workload_id]
                if placement_id != request.placement_id:
                    SimulatedPod.objects.filter(workload_id=workload_id).update(**fields(request))
            SimulatedPod.objects.bulk_create(
                [
                    SimulatedPod(workload_id=r.workload_id, **fields(r))
                    for r in requests
                    if r.workload_id not in existing
                ],
                batch_size=1000,
                ignore_conflicts=True,
            )
        return {}

    def release(
        self,
        workload_id: int,
        name: str,
        *,
        delete_home: bool,
        home_name: str = "",
        placement_id: int | None = None,
    ) -> None:
        self.release_many([BackendRelease(workload_id, name, delete_home, home_name, placement_id)])

    def release_many(self, items: Sequence[BackendRelease]) -> None:
        """`release` of every item in one DELETE (a pod of a later placement of its workload stays)."""
        from scheduling.models import SimulatedPod

        match = Q(pk__in=[])
        for item in items:
            pods = Q(workload_id=item.workload_id)
            if item.placement_id is not None:
                # a pod made before placements were kept (null) is matched by workload, as before
                pods &= Q(placement_id=item.placement_id) | Q(placement_id__isnull=True)
            match |= pods
        SimulatedPod.objects.filter(match).delete()

    def signal_reclaim(
        self,
        workload_id: int,
        name: str,
        *,
        deadline: datetime | None,
        reason: str,
        placement_id: int | None = None,
    ) -> bool:
        """Record the notice on the workload's pod (`reclaim_signal`; None clears it)."""
        from scheduling.models import SimulatedPod

        pods = SimulatedPod.objects.filter(workload_id=workload_id)
        if placement_id is not None:
            pods = pods.filter(Q(placement_id=placement_id) | Q(placement_id__isnull=True))
        signal = None if deadline is None else {"deadline": deadline.isoformat(), "reason": reason}
        return bool(pods.update(reclaim_signal=signal))

    def list_objects(self) -> Sequence[BackendObject]:
        from scheduling.models import SimulatedPod

        return [
            BackendObject(name, workload_id, placement_id)
            for name, workload_id, placement_id in SimulatedPod.objects.values_list(
                "name", "workload_id", "placement_id"
            )
        ]

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

    def apply_mig_layout(self, request: MigLayoutRequest) -> None:
        """Nothing to send: the simulated card changes layout on its own after the delay."""

    def mig_layout_status(self, request: MigLayoutRequest) -> MigLayoutStatus:
        if request.gpu_uuid in settings.TESSERA_SIM_MIG_FAIL_GPUS:
            return MigLayoutStatus(
                MigLayoutPhase.FAILED,
                f"simulated MIG reconfiguration failure of {request.gpu_uuid}",
            )
        ready_at = request.requested_at + timedelta(
            seconds=float(settings.TESSERA_SIM_MIG_RECONFIGURE_SECONDS)
        )
        if timezone.now() >= ready_at:
            return MigLayoutStatus(MigLayoutPhase.READY)
        return MigLayoutStatus(MigLayoutPhase.PENDING, "simulated MIG manager is reconfiguring")

    def fail_pods(self, workload_ids: Iterable[int], message: str) -> int:
        """Mark simulated pods FAILED (a GPU or node failure). Returns how many."""
        from scheduling.models import SimulatedPod

        return SimulatedPod.objects.filter(workload_id__in=list(workload_ids)).update(
            failed=True, message=message
        )
