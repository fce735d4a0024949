"""MIG cards of a `mig` pool as the cycle plans on them, and where a placed MIG workload's instance is.

A card of a MIG pool is read as a dynamic MIG card (`scheduling.engine.mig.MigCard`): its instances are
the ones active placements hold (`PlacementGpu.mig_profile` / `mig_start`), so a released placement frees
its position with no further step. Models without a MIG geometry are left out (the engine has nowhere to
put an instance on them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from quotas.models import QuotaGroup
from quotas.sharing import SharingMode
from scheduling.engine.mig import MigCard, MigInstance, MigLayoutMode
from scheduling.engine.mig_profiles import mig_geometry
from scheduling.models import Gpu, PlacementGpu
from scheduling.services.decide import MigSlot


def mig_cards(group: QuotaGroup, node_names: Iterable[str]) -> tuple[MigCard, ...]:
    """The group's MIG cards on `node_names` with the instances active placements hold (``()`` when the
    group's sharing mode is not ``mig``), in (node, GPU index) order."""
    if group.sharing_mode != SharingMode.MIG:
        return ()
    names = sorted(set(node_names))
    gpus = list(
        Gpu.objects.filter(node__name__in=names)
        .order_by("node__name", "index")
        .values_list("pk", "node__name", "index", "model", "memory_mib", "healthy")
    )
    held: dict[int, list[MigInstance]] = defaultdict(list)
    for gpu_id, profile, start in PlacementGpu.objects.filter(
        gpu_id__in=[g[0] for g in gpus],
        placement__released_at__isnull=True,
        mig_start__isnull=False,
    ).values_list("gpu_id", "mig_profile", "mig_start"):
        held[gpu_id].append(MigInstance(profile, int(start or 0), in_use=True))
    cards = []
    for pk, node, index, model, memory_mib, healthy in gpus:
        name = mig_model(model, memory_mib)
        if name:
            cards.append(
                MigCard(
                    node=node,
                    gpu_index=index,
                    model=name,
                    mode=MigLayoutMode.DYNAMIC,
                    instances=tuple(sorted(held[pk], key=lambda i: i.start)),
                    healthy=healthy,
                )
            )
    return tuple(cards)


def mig_model(model: str, memory_mib: int) -> str:
    """The MIG geometry's model name of a card (``""`` when it has none): inventory may name the model
    without its memory (``H100``), which the card's memory then tells (``H100-80GB``)."""
    for name in (model, f"{model}-{round(memory_mib / 1024)}GB"):
        geometry = mig_geometry(name)
        if geometry is not None:
            return geometry.model
    return ""


def record_mig_slots(slots: Mapping[int, MigSlot]) -> None:
    """Write each placed MIG workload's instance (profile, position) on its active GPU share."""
    for workload_id, slot in sorted(slots.items()):
        PlacementGpu.objects.filter(
            placement__workload_id=workload_id,
            placement__released_at__isnull=True,
            gpu__node__name=slot.node,
            gpu__index=slot.gpu_index,
        ).update(mig_profile=slot.profile, mig_start=slot.start)
