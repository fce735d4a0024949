"""Bounded caches for the engine's memoised pure functions (fragmentation of a node state, per-request-shape
score tables), so that a long-lived state or a full fill of a large cluster cannot grow them without bound.

:class:`TwoGenerationMemo` keeps at most ``2 × capacity`` entries: lookups hit the young generation, then the
old one (promoting the entry); when the young generation is full it becomes the old one and the previous old
generation is dropped. Every operation is O(1) and there is no per-hit bookkeeping, unlike an exact LRU; an
entry used at least once per ``capacity`` insertions is never dropped. The values cached are pure functions of
their keys, so eviction changes the speed, never a result.

:class:`LruTables` is an exact LRU over a few large values (one score vector per request shape).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import numpy as np

K = TypeVar("K")
V = TypeVar("V")

#: Bytes of a numpy array object besides its data buffer (``sys.getsizeof(np.zeros(0))``).
NDARRAY_HEADER = 112


class TwoGenerationMemo(Generic[K, V]):
    """A dictionary-like memo of at most ``2 × capacity`` entries (see the module docstring)."""

    __slots__ = ("_old", "_young", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._young: dict[K, V] = {}
        self._old: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        """The cached value, or ``None``."""
        v = self._young.get(key)
        if v is None:
            v = self._old.get(key)
            if v is not None:
                young = self._young
                if len(young) >= self.capacity:
                    self._old = young
                    young = self._young = {}
                young[key] = v
        return v

    def __setitem__(self, key: K, value: V) -> None:
        young = self._young
        if len(young) >= self.capacity:
            self._old = young
            young = self._young = {}
        young[key] = value

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def clear(self) -> None:
        """Drop every entry."""
        self._young = {}
        self._old = {}

    def items(self) -> Iterable[tuple[K, V]]:
        """Every entry (old generation first; a promoted key may appear in both)."""
        yield from self._old.items()
        yield from self._young.items()

    def nbytes(self) -> int:
        """Approximate bytes held: both dictionaries, their keys and values (shared objects counted once)."""
        seen: set[int] = set()
        total = sys.getsizeof(self._young) + sys.getsizeof(self._old)
        for k, v in self.items():
            total += deep_sizeof(k, seen) + deep_sizeof(v, seen)
        return total


class LruTables(Generic[K, V]):
    """At most ``capacity`` values, the least recently used dropped first."""

    __slots__ = ("_data", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._data: OrderedDict[K, V] = OrderedDict()

    def get_or_create(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key`` (marked most recently used), created with ``make`` when missing."""
        data = self._data
        v = data.get(key)
        if v is None:
            v = make()
            data[key] = v
            if len(data) > self.capacity:
                data.popitem(last=False)
        else:
            data.move_to_end(key)
        return v

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        """Drop every value."""
        self._data.clear()

    def values(self) -> Iterable[V]:
        """The values, least recently used first."""
        return self._data.values()


def deep_sizeof(obj: Any, seen: set[int]) -> int:
    """``sys.getsizeof`` of ``obj`` plus, for tuples, lists and numpy arrays, what they hold (each object
    once per ``seen``); small ints and floats are counted like any object."""
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes) + NDARRAY_HEADER
    size = sys.getsizeof(obj)
    if isinstance(obj, tuple | list):
        size += sum(deep_sizeof(x, seen) for x in obj)
    return size
