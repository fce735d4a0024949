"""A pool's cross-node topology levels (zone → block → rack → NVLink domain) as the engine reads them.

Each level is a name and the node label whose value names a node's domain at that level. The default for
every pool is ``TESSERA_TOPOLOGY_LEVELS`` (``name=label-key`` items, widest first); a pool overrides it
with ``Shard.topology_levels`` (``[[name, label key], ...]``). Nodes get the labels from the inventory:
the Kubernetes backend copies node labels as they are, the simulated inventory writes them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from core.placement import GangTopology, TopologyLevel, TopologyMode

#: Levels a pool may have (zone, block, rack, NVLink domain and a few more).
MAX_LEVELS = 8

LEVEL_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def level_errors(levels: Any) -> list[str]:
    """What is wrong with a list of ``[name, label key]`` pairs (empty when nothing)."""
    if not isinstance(levels, list | tuple):
        return [
            'A list of [level name, node label key] pairs, widest first, e.g. [["rack", "tessera.io/topology-rack"]].'
        ]
    if len(levels) > MAX_LEVELS:
        return [f"At most {MAX_LEVELS} levels, got {len(levels)}."]
    errors: list[str] = []
    names: set[str] = set()
    for i, pair in enumerate(levels):
        if not (
            isinstance(pair, list | tuple)
            and len(pair) == 2
            and all(isinstance(x, str) for x in pair)
        ):
            errors.append(f"Level {i}: a [name, label key] pair of strings.")
            continue
        name, key = pair
        if not LEVEL_NAME.match(name):
            errors.append(
                f"Level {i}: name {name[:40]!r} must be 1-32 lowercase letters, digits, - or _."
            )
        elif name in names:
            errors.append(f"Level {i}: name {name!r} is used twice.")
        if not LABEL_KEY.match(key):
            errors.append(f"Level {i}: {key[:60]!r} is not a Kubernetes label key.")
        names.add(name)
    return errors


def parse_setting(items: Sequence[str]) -> list[list[str]]:
    """``["zone=topology.kubernetes.io/zone", ...]`` as pairs; raises ValueError naming what is wrong."""
    pairs = [list(item.partition("=")[::2]) for item in items]
    errors = level_errors(pairs)
    if errors:
        raise ValueError("; ".join(errors))
    return pairs


def pool_levels(shard_levels: Any) -> tuple[TopologyLevel, ...]:
    """The levels of a pool: its own (``Shard.topology_levels``) when set and valid, else the default."""
    raw = shard_levels if shard_levels and not level_errors(shard_levels) else None
    if raw is None:
        raw = parse_setting(settings.TESSERA_TOPOLOGY_LEVELS)
    return tuple(TopologyLevel(name, key) for name, key in raw)


def gang_topology(gang: Any) -> GangTopology | None:
    """A gang row's co-location request for the engine (None: no gang, or anywhere)."""
    if gang is None or not gang.topology_level:
        return None
    mode = TopologyMode.PREFERRED if gang.topology_mode == "preferred" else TopologyMode.REQUIRED
    return GangTopology(gang.topology_level, mode)
