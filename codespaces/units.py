"""The one conversion between the units people use for a codespace size and the units the scheduler and
the database store: GiB <-> MiB, percent of a GPU <-> milli-GPU, CPU cores <-> milli-CPU.

Forms, API serializers, the size validation and the display all convert through these functions (pure,
no Django), so a page, the API and an error message cannot disagree about what "20 GiB" or "25%" is.
"""

from __future__ import annotations

from decimal import Decimal

MIB_PER_GIB = 1024
MILLI_PER_GPU = 1000
MILLI_PER_PERCENT = MILLI_PER_GPU // 100
MILLI_PER_CORE = 1000


def gib_to_mib(gib: int) -> int:
    """Whole GiB as MiB (20 → 20480)."""
    return int(gib) * MIB_PER_GIB


def mib_to_gib(mib: int) -> float:
    """MiB as GiB, fractional when not a whole GiB (20480 → 20.0, 512 → 0.5)."""
    return mib / MIB_PER_GIB


def percent_to_milli(percent: int) -> int:
    """Percent of one GPU as milli-GPU (25 → 250)."""
    return int(percent) * MILLI_PER_PERCENT


def milli_to_percent(milli: int) -> float:
    """Milli-GPU as percent of one GPU (250 → 25.0)."""
    return milli / MILLI_PER_PERCENT


def cores_to_milli(cores: float | Decimal | int | None) -> int:
    """CPU cores (as typed, e.g. 0.5 or Decimal("4.0")) as milli-CPU (0.5 → 500); None → 0."""
    return int((cores or 0) * MILLI_PER_CORE)


def milli_to_cores(milli: int) -> float:
    """Milli-CPU as cores (2500 → 2.5)."""
    return milli / MILLI_PER_CORE
