"""Resource vectors: the four integer dimensions every quota, request and capacity is counted in.

Pure (no Django). GPU compute is in milli-GPUs (1000 = one whole card), GPU memory and memory in MiB, CPU in
milli-CPUs. A workload that uses a GPU is charged to a quota's GPU side, a CPU-only workload to its CPU side
(see `Side`); on the CPU side the two GPU dimensions are always zero.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

from core.units import MIB_PER_GIB, MILLI_PER_CORE, MILLI_PER_GPU, format_number

DIMENSIONS: tuple[str, ...] = ("gpu_milli", "gpu_memory_mib", "cpu_milli", "memory_mib")
"""The dimensions of a Resources vector, in display and tie-break order."""


class Side(str, Enum):
    """Which half of a quota a workload is charged to."""

    GPU = "gpu"
    CPU = "cpu"

    @property
    def label(self) -> str:
        return "GPU side" if self is Side.GPU else "CPU side"

    @property
    def dimensions(self) -> tuple[str, ...]:
        """The dimensions a quota can limit on this side (the CPU side has no GPU dimensions)."""
        return DIMENSIONS if self is Side.GPU else ("cpu_milli", "memory_mib")


@dataclass(frozen=True, slots=True)
class Resources:
    """An immutable vector of the four integer dimensions.

    `a + b` and `a - b` work per dimension (subtraction may go negative; use `clip()`), `a.fits_in(b)` is
    "every dimension of a ≤ the same dimension of b".
    """

    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0

    @classmethod
    def zero(cls) -> Resources:
        return cls()

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None) -> Resources:
        """Build from a dict with any subset of the dimension names (missing = 0)."""
        values = values or {}
        return cls(**{name: int(values.get(name) or 0) for name in DIMENSIONS})

    def get(self, dimension: str) -> int:
        return int(getattr(self, dimension))

    def replace(self, **changes: int) -> Resources:
        values = self.as_dict()
        values.update(changes)
        return Resources(**values)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    # Sums and differences are spelled out: reclaim and the quota snapshot add thousands of these
    # per cycle, and a generator over getattr costs several times more (values are ints, as `get`).
    def __add__(self, other: Resources) -> Resources:
        return Resources(
            int(self.gpu_milli) + int(other.gpu_milli),
            int(self.gpu_memory_mib) + int(other.gpu_memory_mib),
            int(self.cpu_milli) + int(other.cpu_milli),
            int(self.memory_mib) + int(other.memory_mib),
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            int(self.gpu_milli) - int(other.gpu_milli),
            int(self.gpu_memory_mib) - int(other.gpu_memory_mib),
            int(self.cpu_milli) - int(other.cpu_milli),
            int(self.memory_mib) - int(other.memory_mib),
        )

    def scaled(self, factor: int) -> Resources:
        return Resources(*(self.get(d) * factor for d in DIMENSIONS))

    def fits_in(self, other: Resources) -> bool:
        """True when every dimension is ≤ the same dimension of `other`."""
        return all(self.get(d) <= other.get(d) for d in DIMENSIONS)

    def clip(self) -> Resources:
        """Negative dimensions become 0."""
        return Resources(*(max(0, self.get(d)) for d in DIMENSIONS))

    def minimum(self, other: Resources) -> Resources:
        return Resources(*(min(self.get(d), other.get(d)) for d in DIMENSIONS))

    def maximum(self, other: Resources) -> Resources:
        return Resources(*(max(self.get(d), other.get(d)) for d in DIMENSIONS))

    def only(self, dimensions: tuple[str, ...]) -> Resources:
        """Keep `dimensions`, zero the others."""
        if dimensions == DIMENSIONS:
            return Resources(
                int(self.gpu_milli),
                int(self.gpu_memory_mib),
                int(self.cpu_milli),
                int(self.memory_mib),
            )
        return Resources(*(self.get(d) if d in dimensions else 0 for d in DIMENSIONS))

    def is_zero(self) -> bool:
        return all(self.get(d) == 0 for d in DIMENSIONS)

    def any_positive(self) -> bool:
        return any(self.get(d) > 0 for d in DIMENSIONS)


def total(vectors: Any) -> Resources:
    """Sum of an iterable of Resources."""
    result = Resources()
    for vector in vectors:
        result = result + vector
    return result


#: Base units (milli or MiB) in one of the units people read, per dimension: GPUs, cores, GiB.
PER_UNIT: dict[str, int] = {
    "gpu_milli": MILLI_PER_GPU,
    "gpu_memory_mib": MIB_PER_GIB,
    "cpu_milli": MILLI_PER_CORE,
    "memory_mib": MIB_PER_GIB,
}

UNITS = {
    "gpu_milli": ("GPU", "GPUs"),
    "gpu_memory_mib": ("GiB GPU memory", "GiB GPU memory"),
    "cpu_milli": ("CPU", "CPUs"),
    "memory_mib": ("GiB memory", "GiB memory"),
}


def human_amount(dimension: str, value: int) -> str:
    """A number in the unit people use: 3500 gpu_milli → "3.5 GPUs", 40960 memory_mib → "40 GiB memory"."""
    scaled = value / PER_UNIT[dimension]
    singular, plural = UNITS[dimension]
    return f"{format_number(scaled)} {singular if scaled == 1 else plural}"


def human_number(dimension: str, value: int) -> str:
    """The number alone, in the dimension's unit (GPUs, CPUs or GiB)."""
    return format_number(value / PER_UNIT[dimension])


SHORT_UNITS = {
    "gpu_milli": "GPUs",
    "gpu_memory_mib": "GiB",
    "cpu_milli": "CPUs",
    "memory_mib": "GiB",
}


def human_short(dimension: str, value: int) -> str:
    """Compact form for tables whose row already names the dimension: "3.5 GPUs", "40 GiB"."""
    number = human_number(dimension, value)
    unit = SHORT_UNITS[dimension]
    if number == "1" and unit.endswith("s"):
        unit = unit[:-1]
    return f"{number} {unit}"


def human(resources: Resources, dimensions: tuple[str, ...] = DIMENSIONS) -> str:
    """ "2 GPUs, 80 GiB GPU memory, 16 CPUs, 64 GiB memory" (zero dimensions omitted; "nothing" if all zero)."""
    parts = [human_amount(d, resources.get(d)) for d in dimensions if resources.get(d)]
    return ", ".join(parts) or "nothing"
