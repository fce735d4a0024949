"""MIG geometry per GPU model: the valid GPU-instance profiles and the memory-slice positions each may start at.

Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html (profile names, fraction of
memory and SMs, instances available per profile) and the placements ``nvidia-smi mig -lgipp`` prints for those
products (the guide's placement diagrams): A100-SXM4-40GB, A100-SXM4-80GB, H100-80GB and H200 all have 8 memory
slices and 7 compute slices; a placement ``{0,2,4}:2`` means the profile may start at memory slice 0, 2 or 4 and
spans 2 memory slices.

Only the plain compute profiles are listed: the media-extension variants (``+me``, one per card) and the
``-c`` compute-instance splits are left out because Tessera hands out whole GPU instances.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.units import MIG_COMPUTE_SLICES, MILLI_PER_GPU

#: Memory slices of one card of every model below (placement positions count in these).
MEMORY_SLICES = 8


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one GPU model.

    ``compute_slices`` is the ``g`` of the name (7 = the whole card's SMs), ``memory_slices`` the memory slices it
    spans from its start (8 = all memory), ``starts`` the memory-slice positions it may start at, ``memory_gib``
    the memory the name promises.
    """

    name: str
    compute_slices: int
    memory_slices: int
    memory_gib: int
    starts: tuple[int, ...]

    @property
    def gpu_equivalent(self) -> float:
        """The share of one whole card this profile is worth for quotas: its compute slices over 7."""
        return self.compute_slices / MIG_COMPUTE_SLICES

    def mask(self, start: int) -> int:
        """The bit mask of the memory slices an instance started at ``start`` holds (bit i = slice i)."""
        return ((1 << self.memory_slices) - 1) << start


@dataclass(frozen=True, slots=True)
class MigGeometry:
    """The MIG geometry of one GPU model: its profiles from the smallest to the whole card."""

    model: str
    memory_gib: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        """The profile called ``name`` on this model, or ``None`` when the model has none of that name."""
        for p in self.profiles:
            if p.name == name:
                return p
        return None

    def smallest_covering(self, gpu_milli: int) -> MigProfile:
        """The smallest profile whose compute share covers ``gpu_milli`` (1000 = a whole card)."""
        for p in sorted(self.profiles, key=lambda p: (p.compute_slices, p.memory_slices)):
            if p.compute_slices * MILLI_PER_GPU >= gpu_milli * MIG_COMPUTE_SLICES:
                return p
        return self.profiles[-1]


def _geometry(
    model: str, memory_gib: int, sizes: tuple[int, int, int, int, int, int]
) -> MigGeometry:
    """The common 8-slice / 7-SM geometry with the per-model memory sizes of its six profiles."""
    one, one_double, two, three, four, seven = sizes
    rows = (
        (f"1g.{one}gb", 1, 1, one, (0, 1, 2, 3, 4, 5, 6)),
        (f"1g.{one_double}gb", 1, 2, one_double, (0, 2, 4, 6)),
        (f"2g.{two}gb", 2, 2, two, (0, 2, 4)),
        (f"3g.{three}gb", 3, 4, three, (0, 4)),
        (f"4g.{four}gb", 4, 4, four, (0,)),
        (f"7g.{seven}gb", 7, 8, seven, (0,)),
    )
    return MigGeometry(model, memory_gib, tuple(MigProfile(*row) for row in rows))


#: Canonical model name -> geometry. On the 40 GB A100 ``1g.10gb`` is the two-slice 1g profile; on the 80 GB
#: cards ``1g.10gb`` is the one-slice profile (the guide notes the names follow the memory proportion).
MIG_GEOMETRIES: dict[str, MigGeometry] = {
    "A100-40GB": _geometry("A100-40GB", 40, (5, 10, 10, 20, 20, 40)),
    "A100-80GB": _geometry("A100-80GB", 80, (10, 20, 20, 40, 40, 80)),
    "H100-80GB": _geometry("H100-80GB", 80, (10, 20, 20, 40, 40, 80)),
    "H200": _geometry("H200", 141, (18, 35, 35, 71, 71, 141)),
}

_MODEL_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"A100.*40\s*G", re.IGNORECASE), "A100-40GB"),
    (re.compile(r"A100.*80\s*G", re.IGNORECASE), "A100-80GB"),
    (re.compile(r"H100.*(80\s*G|SXM|HBM3)", re.IGNORECASE), "H100-80GB"),
    (re.compile(r"H200", re.IGNORECASE), "H200"),
)


def mig_geometry(model: str) -> MigGeometry | None:
    """The geometry of a GPU model as inventory or GPU Feature Discovery names it
    (``NVIDIA-A100-SXM4-40GB``, ``h100-80gb``, ``NVIDIA H200``), or ``None`` when the model has no MIG."""
    if model in MIG_GEOMETRIES:
        return MIG_GEOMETRIES[model]
    for pattern, canonical in _MODEL_PATTERNS:
        if pattern.search(model):
            return MIG_GEOMETRIES[canonical]
    return None
