"""How a quota group's (node pool's) GPUs are shared, what a request may ask for there, and what quotas count.

Four modes, one per pool (``QuotaGroup.sharing_mode``):

- ``exclusive``: whole cards only (training, latency-critical inference).
- ``slice``: HAMi compute-% + memory slices, and whole cards (Tessera's behaviour before modes existed).
- ``mig``: the cards are MIG-partitioned; a request names a MIG profile (``1g.10gb``) from the pool's list, hard
  isolation (own SMs, memory and L2). Quotas count an instance as its GPU-equivalent, compute slices / 7
  (``3g.40gb`` = 3/7 of a GPU), so borrowing between tenants works in one unit across profiles.
- ``timeslice``: every card is offered as ``timeslice_replicas`` replicas that share it in turns; **no memory
  isolation** (one replica can use all the card's memory). A request takes one replica, counted as 1/N GPU.

Pure functions on plain values; the service layer raises :class:`portal.errors.InvalidInput` from the
``{field: [message]}`` these return.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models

from core.units import MILLI_PER_GPU, mig_gpu_equivalent_milli, mig_profile_error, milli_to_percent

MAX_MIG_PROFILES = 12
MIN_TIMESLICE_REPLICAS = 2
MAX_TIMESLICE_REPLICAS = 16


class SharingMode(models.TextChoices):
    EXCLUSIVE = "exclusive", "Whole GPUs only"
    SLICE = "slice", "GPU slices (compute % + memory)"
    MIG = "mig", "MIG instances (hard isolation)"
    TIMESLICE = "timeslice", "Time-sliced replicas (no memory isolation)"


#: What the UI says beside each mode (people choose a pool by this sentence).
MODE_NOTES: dict[str, str] = {
    SharingMode.EXCLUSIVE: "Each workload gets whole GPUs to itself.",
    SharingMode.SLICE: "Workloads share a GPU by compute % and memory; memory is limited, compute is shared.",
    SharingMode.MIG: "Each workload gets its own MIG instance: separate compute, memory and cache (hard isolation).",
    SharingMode.TIMESLICE: (
        "Workloads take turns on a GPU; there is no memory isolation: one workload can use all of the GPU's memory."
    ),
}


@dataclass(frozen=True, slots=True)
class Sharing:
    """A pool's sharing mode with its parameters (profiles for ``mig``, replicas for ``timeslice``)."""

    mode: str = SharingMode.SLICE
    mig_profiles: tuple[str, ...] = ()
    timeslice_replicas: int = 1

    @property
    def replica_milli(self) -> int:
        """GPU milli one time-sliced replica counts as (1000 / replicas, rounded down)."""
        return MILLI_PER_GPU // max(self.timeslice_replicas, 1)


def sharing_sentence(sharing: Sharing) -> str:
    """One sentence for the pool's page: the mode, its parameters and what it means for isolation."""
    label = SharingMode(sharing.mode).label
    if sharing.mode == SharingMode.MIG:
        detail = f"{label}: {', '.join(sharing.mig_profiles)}."
    elif sharing.mode == SharingMode.TIMESLICE:
        detail = f"{label}: {sharing.timeslice_replicas} replicas per GPU, each counted as {milli_to_percent(sharing.replica_milli):g} % of a GPU."
    else:
        detail = f"{label}."
    return f"{detail} {MODE_NOTES[sharing.mode]}"


def clean_sharing(
    mode: object, mig_profiles: object = (), timeslice_replicas: object = 1
) -> tuple[Sharing | None, dict[str, list[str]]]:
    """Validate a pool's sharing settings: ``(Sharing, {})`` or ``(None, {field: [reason]})``."""
    errors: dict[str, list[str]] = {}
    if mode not in SharingMode.values:
        errors["sharing_mode"] = [f"Must be one of {', '.join(SharingMode.values)}."]
        return None, errors
    profiles: list[str] = []
    if mig_profiles is None:
        mig_profiles = ()
    if isinstance(mig_profiles, str) or not isinstance(mig_profiles, list | tuple):
        errors["mig_profiles"] = [
            'Must be a list of MIG profile names, e.g. ["1g.10gb", "3g.40gb"].'
        ]
    else:
        for name in mig_profiles:
            if reason := mig_profile_error(name):
                errors["mig_profiles"] = [reason]
                break
            if name not in profiles:
                profiles.append(str(name))
        if len(profiles) > MAX_MIG_PROFILES:
            errors["mig_profiles"] = [f"At most {MAX_MIG_PROFILES} profiles."]
    if mode == SharingMode.MIG and not profiles and "mig_profiles" not in errors:
        errors["mig_profiles"] = ["A MIG pool lists the profiles its cards offer, e.g. 1g.10gb."]
    if mode != SharingMode.MIG and profiles:
        errors["mig_profiles"] = ["Only a MIG pool lists MIG profiles."]
    replicas = timeslice_replicas
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        try:
            replicas = int(str(replicas))
        except ValueError:
            errors["timeslice_replicas"] = ["Must be a whole number."]
            replicas = 1
    if (
        mode == SharingMode.TIMESLICE
        and not MIN_TIMESLICE_REPLICAS <= replicas <= MAX_TIMESLICE_REPLICAS
    ):
        errors["timeslice_replicas"] = [
            f"A time-sliced pool offers {MIN_TIMESLICE_REPLICAS} to {MAX_TIMESLICE_REPLICAS} replicas per GPU."
        ]
    if mode != SharingMode.TIMESLICE and replicas != 1:
        errors["timeslice_replicas"] = ["Only a time-sliced pool has replicas (leave it at 1)."]
    if errors:
        return None, errors
    return Sharing(str(mode), tuple(profiles), int(replicas)), {}


#: The least GPU memory a slice (part of one card's compute, ``slice`` pools) asks for: its memory limit
#: is what isolates it on the shared card, so a slice of 0 MiB is one nothing holds to a size. The
#: jobs path checks it here (`request_errors`), codespaces' sizes through `slice_memory_too_small`.
MIN_SLICE_GPU_MEMORY_MIB = 1
SLICE_MEMORY_REFUSAL = (
    f"A slice of a GPU needs some of its memory (at least {MIN_SLICE_GPU_MEMORY_MIB} MiB)."
)


def slice_memory_too_small(gpu_memory_mib: int) -> bool:
    return gpu_memory_mib < MIN_SLICE_GPU_MEMORY_MIB


def request_errors(
    sharing: Sharing,
    *,
    gpu_count: int,
    gpu_milli: int,
    mig_profile: str = "",
    gpu_memory_mib: int | None = None,
) -> dict[str, list[str]]:
    """What the pool refuses in a GPU request (``{}`` = allowed). CPU-only requests are allowed everywhere.
    `gpu_memory_mib` (when given) must be enough for a slice in a ``slice`` pool; a time-sliced replica
    has no memory isolation and a whole card comes with all its memory."""
    if mig_profile:
        if sharing.mode != SharingMode.MIG:
            return {"mig_profile": ["This pool does not offer MIG instances."]}
        if mig_profile not in sharing.mig_profiles:
            return {"mig_profile": [f"This pool offers {', '.join(sharing.mig_profiles)}."]}
        return {}
    if gpu_count == 0 or gpu_milli == 0:
        return {}
    whole = gpu_milli >= MILLI_PER_GPU
    if sharing.mode == SharingMode.EXCLUSIVE and not whole:
        return {"gpu_milli": ["This pool hands out whole GPUs only."]}
    if sharing.mode == SharingMode.MIG:
        return {
            "mig_profile": [
                f"This pool's GPUs are MIG-partitioned: pick one of {', '.join(sharing.mig_profiles)}."
            ]
        }
    if sharing.mode == SharingMode.TIMESLICE and (
        gpu_count != 1 or gpu_milli != sharing.replica_milli
    ):
        return {
            "gpu_milli": [
                f"This pool time-slices each GPU into {sharing.timeslice_replicas} replicas: ask for one "
                f"({milli_to_percent(sharing.replica_milli):g} % of a GPU, no memory isolation)."
            ]
        }
    if (
        sharing.mode == SharingMode.SLICE
        and not whole
        and gpu_memory_mib is not None
        and slice_memory_too_small(gpu_memory_mib)
    ):
        return {"gpu_memory_mib": [SLICE_MEMORY_REFUSAL]}
    return {}


def quota_gpu_milli(
    sharing: Sharing, *, gpu_count: int, gpu_milli: int, mig_profile: str = ""
) -> int:
    """GPU milli a request counts against its quota in this pool: a MIG instance its GPU-equivalent, a
    time-sliced replica 1/N of a GPU, anything else what it asks for."""
    if mig_profile:
        return mig_gpu_equivalent_milli(mig_profile)
    if sharing.mode == SharingMode.TIMESLICE and gpu_count == 1:
        return sharing.replica_milli
    return gpu_count * gpu_milli
