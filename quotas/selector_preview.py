"""The quota-group node-selector builder: the label keys and values the inventory offers, which nodes
and GPUs a selector matches, and which other groups it would overlap (the same check
`services.create_group` / `update_group` refuse with, so the preview and the refusal agree)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from quotas.cluster import cluster_rows
from quotas.models import QuotaGroup
from quotas.usage import node_matches, nodes_matching_both, selectors_overlap

# What the builder offers at most (a cluster with more labels still works: type the key).
MAX_OFFERED_KEYS = 100
MAX_OFFERED_VALUES = 100
# Names listed in a preview at most (the counts are always whole).
MAX_LISTED_NODES = 50


@dataclass(frozen=True)
class SelectorConflict:
    """Another group a selector can match the same nodes as, and the nodes both match now."""

    group: str
    selector: dict[str, Any]
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class SelectorPreview:
    """What a selector matches now: node names, GPU counts per model, overlaps with other groups."""

    nodes: tuple[str, ...]
    gpus_by_model: dict[str, int]
    conflicts: tuple[SelectorConflict, ...]

    @property
    def gpu_count(self) -> int:
        return sum(self.gpus_by_model.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "node_count": len(self.nodes),
            "nodes": list(self.nodes[:MAX_LISTED_NODES]),
            "gpu_count": self.gpu_count,
            "gpus_by_model": self.gpus_by_model,
            "conflicts": [
                {"group": c.group, "selector": c.selector, "nodes": list(c.nodes)}
                for c in self.conflicts
            ],
        }


def inventory_labels() -> dict[str, list[str]]:
    """Every node label key of the inventory with its values, both sorted (bounded)."""
    values: dict[str, set[str]] = {}
    for labels in cluster_rows().nodes().values_list("labels", flat=True):
        for key, value in (labels or {}).items():
            values.setdefault(str(key), set()).add(str(value))
    return {
        key: sorted(values[key])[:MAX_OFFERED_VALUES] for key in sorted(values)[:MAX_OFFERED_KEYS]
    }


def selector_conflicts(selector: dict[str, str], group_pk: int | None) -> list[SelectorConflict]:
    """The other groups (not `group_pk`) whose selector can match a node `selector` matches (they
    give no shared key two values), by name, each with the nodes both match now."""
    others = (
        QuotaGroup.objects.all() if group_pk is None else QuotaGroup.objects.exclude(pk=group_pk)
    )
    return [
        SelectorConflict(
            group=g.name,
            selector=dict(g.node_selector or {}),
            nodes=tuple(nodes_matching_both(selector, [g.node_selector or {}])),
        )
        for g in others.order_by("name")
        if selectors_overlap(selector, g.node_selector)
    ]


def preview_selector(selector: dict[str, str], group_pk: int | None = None) -> SelectorPreview:
    """The nodes `selector` matches now (by name), their GPUs counted per model, and the groups it
    would overlap (a save would be refused while there is one)."""
    nodes = [
        (pk, name)
        for pk, name, labels in cluster_rows()
        .nodes()
        .order_by("name")
        .values_list("pk", "name", "labels")
        if node_matches(labels, selector)
    ]
    models = Counter(
        model
        for model in cluster_rows()
        .nodes()
        .filter(pk__in=[pk for pk, _ in nodes])
        .values_list("gpus__model", flat=True)
        if model is not None  # a node without GPUs
    )
    return SelectorPreview(
        nodes=tuple(name for _, name in nodes),
        gpus_by_model=dict(sorted(models.items())),
        conflicts=tuple(selector_conflicts(selector, group_pk)),
    )
