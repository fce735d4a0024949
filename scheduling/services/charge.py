"""What a whole-card workload is charged in GPU memory (docs/quotas.md "What a workload is charged").

A slice is charged the memory it asks for. A whole card comes with all its memory, so it is charged the
memory of its card: while pending, of the largest card among the models it may be placed on in its pool
(the most it can end up holding, so admission never lets it exceed a max once placed); once placed, of
the card it holds (`mark_placed_whole_cards`). `quotas.usage.charged_gpu_memory_mib` reads the result.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from functools import cached_property

from django.db.models import Max, QuerySet

from core.units import WHOLE_CARD_MILLI
from quotas.models import QuotaGroup
from quotas.usage import matching_node_ids
from scheduling.models import Gpu, Workload
from scheduling.services.pool_cache import pool_cached


class PoolCards:
    """The largest card memory per GPU model, in one group's pool and in the whole inventory (every
    card, healthy or not: a card's memory does not change with its health). Read on first use, so a
    CPU-only request costs no query."""

    def __init__(self, group: QuotaGroup) -> None:
        self.group = group

    @classmethod
    def of(cls, group: QuotaGroup) -> PoolCards:
        return cls(group)

    @staticmethod
    def _largest(gpus: QuerySet[Gpu]) -> dict[str, int]:
        rows = gpus.values("model").annotate(m=Max("memory_mib")).order_by()
        return {str(r["model"]): int(r["m"] or 0) for r in rows}

    @cached_property
    def in_pool(self) -> dict[str, int]:
        """Model → largest memory among the cards of the nodes counted toward the group (cached per
        worker while the inventory is unchanged: `scheduling.services.pool_cache`)."""
        group = self.group
        if group.pk is None:
            return self._largest(Gpu.objects.filter(node_id__in=matching_node_ids(group)))
        return pool_cached(
            group,
            "largest cards",
            lambda: self._largest(Gpu.objects.filter(node_id__in=matching_node_ids(group))),
        )

    @cached_property
    def anywhere(self) -> dict[str, int]:
        """Model → largest memory among every card of the inventory."""
        return self._largest(Gpu.objects.all())

    def largest_memory_mib(self, gpu_models: Sequence[str]) -> int:
        """The largest card among `gpu_models` (empty = any) in the pool; when the pool has none of them,
        in the inventory; 0 when there is no such card at all."""
        for cards in (self.in_pool, self.anywhere):
            sizes = [m for model, m in cards.items() if not gpu_models or model in gpu_models]
            if sizes:
                return max(sizes)
        return 0


def warm_cards(group: QuotaGroup) -> None:
    """Read the largest card per model of the group's pool into the worker's cache now (an idle cycle
    does it, for the next whole-GPU submission or requeue)."""
    PoolCards.of(group).in_pool  # noqa: B018 - read for its cache


def whole_card_memory_mib(
    cards: PoolCards, *, gpu_count: int, gpu_milli: int, gpu_models: Sequence[str]
) -> int:
    """The per-GPU memory a pending request is charged as whole cards, 0 for slices and CPU work."""
    if gpu_count < 1 or gpu_milli < WHOLE_CARD_MILLI:
        return 0
    return cards.largest_memory_mib(gpu_models)


def recharge_pending(workload_ids: Iterable[int]) -> None:
    """Charge whole-card workloads that go back to PENDING (requeued) the largest card they may be
    placed on again, instead of the card they held. One UPDATE per distinct value."""
    rows = (
        Workload.objects.filter(
            pk__in=list(workload_ids), gpu_count__gt=0, gpu_milli__gte=WHOLE_CARD_MILLI
        )
        .order_by("pk")
        .values_list("pk", "gpu_count", "gpu_milli", "gpu_models", "quota__group_id")
    )
    cards: dict[int, PoolCards] = {}
    by_value: dict[int, list[int]] = defaultdict(list)
    for pk, gpu_count, gpu_milli, gpu_models, group_id in rows:
        if group_id not in cards:
            cards[group_id] = PoolCards.of(QuotaGroup.objects.get(pk=group_id))
        value = whole_card_memory_mib(
            cards[group_id],
            gpu_count=gpu_count,
            gpu_milli=gpu_milli,
            gpu_models=list(gpu_models or ()),
        )
        by_value[value].append(pk)
    for value, ids in sorted(by_value.items()):
        Workload.objects.filter(pk__in=ids).update(whole_card_memory_mib=value)


def mark_placed_whole_cards(placed: Iterable[tuple[int, int]]) -> None:
    """Charge placed whole-card workloads the memory of the cards they hold: `placed` is
    (workload pk, per-GPU memory of its placement). One UPDATE per distinct value."""
    by_value: dict[int, list[int]] = defaultdict(list)
    for workload_id, memory_mib in placed:
        by_value[int(memory_mib)].append(int(workload_id))
    for value, ids in sorted(by_value.items()):
        Workload.objects.filter(pk__in=ids).update(whole_card_memory_mib=value)
