"""What a group's pool looks like (its nodes, their cards, its capacity), read once per worker process and
again only when the inventory it depends on moves.

Reading every node and GPU of a 2,000-node pool costs a fifth of a second, and a submission (can the job
ever fit, `scheduling.services.feasibility`), the card memory a whole-GPU request is charged
(`scheduling.services.charge`), a requeue and every cycle (`scheduling.services.quota_bridge`) read it.
The key is a fingerprint of the inventory, a handful of small queries: the node count and last change
(a node's labels, size or taints change with `updated_at`), the cordoned or unhealthy nodes, the
unhealthy GPUs, the cards per model (how many, their memory together and the largest), and every
group's selector (a node an older group also matches counts toward that group). Cached values are shared:
callers read them and never change them.

A cycle or a submission reads several pool values within a fraction of a second: inside
`one_inventory_reading()` the fingerprint is read once (the next cycle or submission sees any change).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from django.db.models import Count, Max, Q, Sum

from quotas.models import QuotaGroup
from scheduling.models import Gpu, Node

T = TypeVar("T")

_cache: dict[tuple[int, str], tuple[tuple[Any, ...], Any]] = {}
_lock = threading.Lock()
_reading: ContextVar[list[tuple[Any, ...]] | None] = ContextVar("inventory_reading", default=None)


@contextmanager
def one_inventory_reading() -> Iterator[None]:
    """Within the block (a cycle, a submission), `pool_cached` reads the inventory fingerprint once.
    Nested blocks share the outermost one's reading. Also a decorator."""
    if _reading.get() is not None:
        yield
        return
    token = _reading.set([])
    try:
        yield
    finally:
        _reading.reset(token)


def inventory_fingerprint() -> tuple[Any, ...]:
    """A cheap summary of the inventory every pool reading depends on (see the module docstring)."""
    nodes = Node.objects.aggregate(n=Count("pk"), last=Max("updated_at"))
    cards = tuple(
        Gpu.objects.values("model")
        .annotate(n=Count("pk"), total=Sum("memory_mib"), largest=Max("memory_mib"))
        .order_by("model")
        .values_list("model", "n", "total", "largest")
    )
    off_nodes = tuple(
        Node.objects.filter(Q(cordoned=True) | Q(healthy=False))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    bad_gpus = tuple(Gpu.objects.filter(healthy=False).order_by("pk").values_list("pk", flat=True))
    selectors = tuple(
        (pk, json.dumps(selector or {}, sort_keys=True))
        for pk, selector in QuotaGroup.objects.order_by("pk").values_list("pk", "node_selector")
    )
    return (nodes["n"], nodes["last"], cards, off_nodes, bad_gpus, selectors)


def pool_cached(group: QuotaGroup, what: str, read: Callable[[], T]) -> T:
    """`read()` of `group`'s pool, from the worker's cache while the inventory fingerprint is the one it
    was read at. `what` names the reading (one group has several)."""
    reading = _reading.get()
    if reading:
        key = reading[0]
    else:
        key = inventory_fingerprint()
        if reading is not None:
            reading.append(key)
    slot = (int(group.pk), what)
    with _lock:
        hit = _cache.get(slot)
    if hit is not None and hit[0] == key:
        value: T = hit[1]
        return value
    value = read()
    with _lock:
        _cache[slot] = (key, value)
    return value


def forget_pools() -> None:
    """Drop every cached pool reading (tests roll the database back under the same keys)."""
    with _lock:
        _cache.clear()
