"""MIG cards of a `mig` pool as the cycle plans on them, and where a placed MIG workload's instance is.

A card of a MIG pool is a dynamic MIG card (`scheduling.engine.mig.MigCard`) whose instances are the ones
active placements hold (`PlacementGpu.mig_profile` / `mig_start`), so a released placement frees its
position with no further step; or, when inventory reports a static layout the operator fixed
(`Gpu.mig_layout`, from the device plugin's mixed strategy or a driver's ResourceSlices), a static card
with those instances, the held ones in use: the engine then only hands out a free instance of exactly the
profile asked for, and never plans a reconfiguration of it. Models without a MIG geometry are left out (the engine has nowhere to
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
        .values_list("pk", "node__name", "index", "model", "memory_mib", "healthy", "mig_layout")
    )
    held: dict[int, list[MigInstance]] = defaultdict(list)
    for gpu_id, profile, start in PlacementGpu.objects.filter(
        gpu_id__in=[g[0] for g in gpus],
        placement__released_at__isnull=True,
        mig_start__isnull=False,
    ).values_list("gpu_id", "mig_profile", "mig_start"):
        held[gpu_id].append(MigInstance(profile, int(start or 0), in_use=True))
    cards = []
    for pk, node, index, model, memory_mib, healthy, layout in gpus:
        name = mig_model(model, memory_mib)
        if not name:
            continue
        static = static_instances(layout, held[pk])
        cards.append(
            MigCard(
                node=node,
                gpu_index=index,
                model=name,
                mode=MigLayoutMode.STATIC if static else MigLayoutMode.DYNAMIC,
                instances=static or tuple(sorted(held[pk], key=lambda i: i.start)),
                healthy=healthy,
            )
        )
    return tuple(cards)


def static_instances(layout: object, held: Iterable[MigInstance]) -> tuple[MigInstance, ...]:
    """A static card's instances: the stored layout's ``[profile, start]`` entries, in use where an active
    placement holds that instance (``()`` when there is no usable layout: the card is dynamic). An entry
    that is not a (profile, start) pair is skipped, so one bad row never stops the cycle."""
    if not isinstance(layout, list):
        return ()
    in_use = {(i.profile, i.start) for i in held}
    out = {}
    for entry in layout[:8]:
        if (
            isinstance(entry, list | tuple)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and isinstance(entry[1], int)
        ):
            out[(entry[0], entry[1])] = MigInstance(
                entry[0], entry[1], in_use=(entry[0], entry[1]) in in_use
            )
    return tuple(sorted(out.values(), key=lambda i: i.start))


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
