"""MIG cards of a `mig` pool as the cycle plans on them, and where a placed MIG workload's instance is.

A card of a MIG pool is a dynamic MIG card (`core.placement.mig.MigCard`) whose instances are the ones
active placements hold (`PlacementGpu.mig_profile` / `mig_start`), so a released placement frees its
position with no further step; or, when inventory reports a static layout the operator fixed
(`Gpu.mig_layout`, from the device plugin's mixed strategy or a driver's ResourceSlices), a static card
with those instances, the held ones in use: the engine then only hands out a free instance of exactly the
profile asked for, and never plans a reconfiguration of it. Models without a MIG geometry are left out (the engine has nowhere to
put an instance on them).

A card an operator set to dynamic MIG (`Gpu.mig_dynamic`) has the layout it has now in `Gpu.mig_layout`;
its new instances need a planned reconfiguration (`scheduling.services.mig_reconfig`), so it is offered as
a *relayout card* (dynamic, `MigPool.relayout_cards`) only while it is empty: no instance in use and no
reconfiguration of its node under way (the MIG manager applies one config per node), and none of its
own failed within the last `TESSERA_MIG_RECONFIGURE_TIMEOUT_SECONDS`. Otherwise its
layout is fixed for now (static), and the card a reconfiguration is changing takes no work at all.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from core.placement.mig import MigCard, MigInstance, MigLayoutMode, layout_errors
from core.placement.mig_profiles import mig_geometry
from core.units import MIB_PER_GIB
from quotas.models import QuotaGroup
from quotas.sharing import SharingMode
from scheduling.choices import ACTIVE_RECONFIGURATION_STATES, MigReconfigurationState
from scheduling.models import Gpu, MigReconfiguration, PlacementGpu
from scheduling.services.decide import MigSlot

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MigPool:
    """A pool's MIG cards as the cycle plans on them, and which of them a reconfiguration may change."""

    cards: tuple[MigCard, ...] = ()
    relayout_cards: frozenset[tuple[str, int]] = frozenset()


def mig_cards(group: QuotaGroup, node_names: Iterable[str]) -> tuple[MigCard, ...]:
    """The group's MIG cards on `node_names` with the instances active placements hold (``()`` when the
    group's sharing mode is not ``mig``), in (node, GPU index) order."""
    return mig_pool(group, node_names).cards


def mig_pool(group: QuotaGroup, node_names: Iterable[str]) -> MigPool:
    """`mig_cards` and the relayout cards among them (see the module docstring)."""
    if group.sharing_mode != SharingMode.MIG:
        return MigPool()
    names = sorted(set(node_names))
    gpus = list(
        Gpu.objects.filter(node__name__in=names)
        .order_by("node__name", "index")
        .values_list(
            "pk",
            "node__name",
            "index",
            "model",
            "memory_mib",
            "healthy",
            "mig_layout",
            "mig_dynamic",
        )
    )
    changing = set(
        MigReconfiguration.objects.filter(
            gpu_id__in=[g[0] for g in gpus if g[7]], state__in=ACTIVE_RECONFIGURATION_STATES
        ).values_list("gpu_id", "gpu__node__name")
    )
    busy_nodes = {node for _gpu, node in changing}
    busy_gpus = {gpu for gpu, _node in changing}
    # A card whose reconfiguration just failed keeps its layout for a while (no retry loop on a bad card).
    backoff = timezone.now() - timedelta(
        seconds=int(settings.TESSERA_MIG_RECONFIGURE_TIMEOUT_SECONDS)
    )
    failed = set(
        MigReconfiguration.objects.filter(
            gpu_id__in=[g[0] for g in gpus if g[7]],
            state=MigReconfigurationState.FAILED,
            finished_at__gt=backoff,
        ).values_list("gpu_id", flat=True)
    )
    held: dict[int, list[MigInstance]] = defaultdict(list)
    for gpu_id, profile, start in PlacementGpu.objects.filter(
        gpu_id__in=[g[0] for g in gpus],
        placement__released_at__isnull=True,
        mig_start__isnull=False,
    ).values_list("gpu_id", "mig_profile", "mig_start"):
        held[gpu_id].append(MigInstance(profile, int(start or 0), in_use=True))
    cards = []
    relayout: set[tuple[str, int]] = set()
    for pk, node, index, model, memory_mib, healthy, layout, dynamic in gpus:
        name = mig_model(model, memory_mib)
        if not name:
            continue
        if dynamic:
            card = _dynamic_card(
                node, index, name, layout, held[pk], healthy and pk not in busy_gpus
            )
            if card is None:
                continue
            if (
                card.mode is MigLayoutMode.STATIC
                and node not in busy_nodes
                and pk not in failed
                and not any(i.in_use for i in card.instances)
            ):
                card = MigCard(
                    node, index, name, MigLayoutMode.DYNAMIC, card.instances, card.healthy
                )
                relayout.add((node, index))
            cards.append(card)
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
    return MigPool(tuple(cards), frozenset(relayout))


def _dynamic_card(
    node: str,
    index: int,
    model: str,
    layout: object,
    held: list[MigInstance],
    healthy: bool,
) -> MigCard | None:
    """A dynamic card as static with the layout it has now (the held instances in use; a held instance
    the stored layout lacks is added, so nothing in use is ever handed out twice). None, logged, when
    the stored layout is not a valid layout of the model: one bad row never stops the cycle."""
    instances = {(i.profile, i.start): i for i in static_instances(layout, held)}
    for i in held:
        instances[(i.profile, i.start)] = i
    ordered = tuple(sorted(instances.values(), key=lambda i: i.start))
    errors = layout_errors(model, [(i.profile, i.start) for i in ordered])
    if errors:
        logger.error("MIG card %s/%s left out: %s", node, index, "; ".join(errors))
        return None
    return MigCard(node, index, model, MigLayoutMode.STATIC, ordered, healthy)


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
    for name in (model, f"{model}-{round(memory_mib / MIB_PER_GIB)}GB"):
        geometry = mig_geometry(name)
        if geometry is not None:
            return geometry.model
    return ""


def layout_pairs(layout: object) -> list[tuple[str, int]]:
    """A stored layout's valid-looking ``(profile, start)`` entries (see `static_instances`)."""
    return [(i.profile, i.start) for i in static_instances(layout, ())]


def record_mig_slots(slots: Mapping[int, MigSlot]) -> None:
    """Write each placed MIG workload's instance (profile, position) on its active GPU share."""
    for workload_id, slot in sorted(slots.items()):
        PlacementGpu.objects.filter(
            placement__workload_id=workload_id,
            placement__released_at__isnull=True,
            gpu__node__name=slot.node,
            gpu__index=slot.gpu_index,
        ).update(mig_profile=slot.profile, mig_start=slot.start)
