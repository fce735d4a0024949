"""A codespace size: what people type (GiB, %, cores) and what the scheduler takes (MiB, milli), the one
conversion between them and the one validation of a size against a template and a pool."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from codespaces import pools
from codespaces.choices import (
    GpuMode,
)
from codespaces.models import MAX_MEMORY_MIB, CodespaceTemplate, TemplatePreset
from codespaces.services.requests import shown
from core import units
from core.units import MIB_PER_GIB, MigProfileError, parse_mig_profile
from portal.errors import InvalidInput
from quotas.models import Quota
from quotas.sharing import request_errors, slice_memory_too_small
from scheduling import services as scheduling_services

# --- What a user asks for ------------------------------------------------------------------------

# The bounds of a typed size, in service units (pages convert them to theirs through `core.units`):
# they only keep the numbers finite and storable, `validate_size` checks the template's ranges and names
# the field. {field: (minimum, maximum)}; the form, the preview form and the API serializer read them.
SIZE_INPUT_BOUNDS: dict[str, tuple[int, int]] = {
    "gpu_count": (0, 64),
    "gpu_percent": (-1000, 1000),
    "gpu_memory_gib": (-(10**6), 10**6),
    "cpu_milli": (0, 10**7),
    "memory_mib": (0, MAX_MEMORY_MIB),
}

# The rules of a GPU size whatever the template: a slice takes 1-100 % of one GPU and some of its memory
# (quotas.sharing.slice_memory_too_small, the jobs' rule too: in whole GiB, at least 1), whole cards
# are at least one. `size_rule_violations` applies them to a user's size (`validate_size`) and to a
# template's presets (`templates_admin`).
SLICE_PERCENT_RANGE = (1, 100)
MIN_WHOLE_CARDS = 1


def size_rule_violations(
    gpu_mode: str, *, gpu_percent: int, gpu_memory_gib: int, gpu_count: int
) -> frozenset[str]:
    """The fields of a size that break the rules above (pure): some of "gpu_percent",
    "gpu_memory_gib" (slices) and "gpu_count" (whole cards)."""
    bad: set[str] = set()
    if gpu_mode == GpuMode.SLICE:
        low, high = SLICE_PERCENT_RANGE
        if not low <= gpu_percent <= high:
            bad.add("gpu_percent")
        if slice_memory_too_small(units.gib_to_mib(gpu_memory_gib)):
            bad.add("gpu_memory_gib")
    elif gpu_mode == GpuMode.WHOLE and gpu_count < MIN_WHOLE_CARDS:
        bad.add("gpu_count")
    return frozenset(bad)


@dataclass(frozen=True)
class SizeRequest:
    """A codespace size as typed in the form / API (GiB and %, as people think), before validation."""

    gpu_mode: str = GpuMode.SLICE
    gpu_count: int = 1
    gpu_percent: int = 0
    gpu_memory_gib: int = 0
    gpu_model: str = ""
    cpu_milli: int = 2000
    memory_mib: int = 8192
    mig_profile: str = ""

    @classmethod
    def from_page(cls, data: dict[str, Any]) -> SizeRequest:
        """A size as the pages type it (cleaned form data: CPU in cores, memory in GiB; blank fields
        are 0, a blank mode a slice), in service units (`core.units`)."""
        return cls(
            gpu_mode=data.get("gpu_mode") or GpuMode.SLICE,
            gpu_count=data.get("gpu_count") or 0,
            gpu_percent=data.get("gpu_percent") or 0,
            gpu_memory_gib=data.get("gpu_memory_gib") or 0,
            gpu_model=data.get("gpu_model") or "",
            cpu_milli=units.cores_to_milli(data.get("cpu_cores")),
            memory_mib=units.gib_to_mib(data.get("memory_gib") or 0),
            mig_profile=data.get("mig_profile") or "",
        )

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> SizeRequest:
        """A size as the API takes it (validated `SizeSerializer` data: CPU in milli, memory in MiB)."""
        return cls(
            gpu_mode=data["gpu_mode"],
            gpu_count=data["gpu_count"],
            gpu_percent=data["gpu_percent"],
            gpu_memory_gib=data["gpu_memory_gib"],
            gpu_model=data["gpu_model"],
            cpu_milli=data["cpu_milli"],
            memory_mib=data["memory_mib"],
            mig_profile=data.get("mig_profile") or "",
        )

    @classmethod
    def from_preset(cls, preset: TemplatePreset) -> SizeRequest:
        return cls(
            gpu_mode=preset.gpu_mode,
            gpu_count=preset.gpu_count,
            gpu_percent=preset.gpu_percent,
            gpu_memory_gib=preset.gpu_memory_gib,
            gpu_model=preset.gpu_model,
            cpu_milli=preset.cpu_milli,
            memory_mib=preset.memory_mib,
            mig_profile=preset.mig_profile if preset.gpu_mode == GpuMode.MIG else "",
        )


@dataclass(frozen=True)
class Resources:
    """Validated resources in scheduler units (the submit_workload / preview_request keywords)."""

    gpu_mode: str
    gpu_count: int
    gpu_milli: int
    gpu_memory_mib: int
    gpu_model: str
    cpu_milli: int
    memory_mib: int
    gpu_models: tuple[str, ...] = ()
    """The models it may be placed on (empty = any): `gpu_model`, or for a slice with none the pool's
    models that the template and the cluster allow slices on (`slice_models`)."""
    mig_profile: str = ""
    """A MIG size's profile (1g.10gb): one instance, `gpu_milli` its GPU-equivalent."""

    def scheduler_kwargs(self) -> dict[str, Any]:
        if self.mig_profile:
            # submit derives the instance's GPU-equivalent and memory from the profile
            return {
                "cpu_milli": self.cpu_milli,
                "memory_mib": self.memory_mib,
                "gpu_models": self.gpu_models,
                "mig_profile": self.mig_profile,
            }
        return {
            "cpu_milli": self.cpu_milli,
            "memory_mib": self.memory_mib,
            "gpu_count": self.gpu_count,
            "gpu_milli": self.gpu_milli,
            "gpu_memory_mib": self.gpu_memory_mib,
            "gpu_models": self.gpu_models,
            "mig_profile": self.mig_profile,
        }


class FieldErrors:
    """Collects field errors so one refusal names every bad field."""

    def __init__(self) -> None:
        self.fields: dict[str, list[str]] = defaultdict(list)

    def add(self, name: str, message: str) -> None:
        self.fields[name].append(message)

    def raise_if_any(self) -> None:
        if self.fields:
            message = "; ".join(f"{name}: {errors[0]}" for name, errors in self.fields.items())
            raise InvalidInput(message, fields=dict(self.fields))


def validate_size(
    template: CodespaceTemplate, quota: Quota, size: SizeRequest, errors: FieldErrors | None = None
) -> Resources:
    """Check a size against the template's ranges and the quota's pool. Raises InvalidInput naming
    every bad field (compute %, GPU memory vs the largest GPU, whole-card-only models, ...)."""
    own = errors is None
    errors = errors or FieldErrors()
    mode = size.gpu_mode
    if mode not in GpuMode.values:
        errors.add(
            "gpu_mode", f"Unknown GPU mode {mode!r}; use one of {', '.join(GpuMode.values)}."
        )
    # The pool's GPU models matter only to GPU sizes: a CPU-only submit skips the nodes query.
    pool_models = pools.gpu_models_of_group(quota.group) if mode != GpuMode.NONE else []
    pool_name = quota.group.name
    if size.gpu_model and mode != GpuMode.NONE:
        if not any(m.model == size.gpu_model for m in pool_models):
            have = ", ".join(m.model for m in pool_models) or "none"
            errors.add(
                "gpu_model",
                f"Pool {pool_name} has no healthy {shown(size.gpu_model)} GPU (it has: {have}).",
            )
    if not (template.min_cpu_milli <= size.cpu_milli <= template.max_cpu_milli):
        errors.add(
            "cpu_milli",
            f"CPU must be between {units.milli_to_cores(template.min_cpu_milli):g} and "
            f"{units.milli_to_cores(template.max_cpu_milli):g} cores for {template.name} "
            f"(got {units.milli_to_cores(size.cpu_milli):g}).",
        )
    if not (template.min_memory_mib <= size.memory_mib <= template.max_memory_mib):
        errors.add(
            "memory_mib",
            f"Memory must be between {units.mib_to_gib(template.min_memory_mib):g} and "
            f"{units.mib_to_gib(template.max_memory_mib):g} GiB for {template.name} "
            f"(got {units.mib_to_gib(size.memory_mib):g} GiB).",
        )
    gpu_count, gpu_milli, gpu_memory_mib = 0, 0, 0
    gpu_models: tuple[str, ...] = (size.gpu_model,) if size.gpu_model else ()
    broken = size_rule_violations(
        mode,
        gpu_percent=size.gpu_percent,
        gpu_memory_gib=size.gpu_memory_gib,
        gpu_count=size.gpu_count,
    )
    if mode == GpuMode.SLICE:
        if "gpu_percent" in broken:
            errors.add(
                "gpu_percent",
                f"Compute must be between 1% and 100% of one GPU (got {size.gpu_percent}%).",
            )
        largest = pools.largest_gpu_memory_mib(quota.group, size.gpu_model)
        largest_gib = largest // MIB_PER_GIB
        if "gpu_memory_gib" in broken:
            errors.add(
                "gpu_memory_gib", f"GPU memory must be at least 1 GiB (got {size.gpu_memory_gib})."
            )
        elif units.gib_to_mib(size.gpu_memory_gib) > largest and "gpu_model" not in errors.fields:
            which = f"{size.gpu_model} " if size.gpu_model else ""
            errors.add(
                "gpu_memory_gib",
                f"{size.gpu_memory_gib} GiB is more than the largest {which}GPU in pool "
                f"{pool_name} ({largest_gib} GiB).",
            )
        if not template.allow_slices:
            errors.add(
                "gpu_model",
                f"template {template.name} only offers whole cards: choose whole cards or another "
                "model.",
            )
        elif "gpu_model" not in errors.fields:
            try:
                gpu_models = slice_models(template, quota, size.gpu_model, pool_models)
            except InvalidInput as exc:
                for name, messages in exc.fields.items():
                    errors.add(name, messages[0])
        gpu_count, gpu_milli, gpu_memory_mib = (
            1,
            units.percent_to_milli(size.gpu_percent),
            units.gib_to_mib(size.gpu_memory_gib),
        )
    elif mode == GpuMode.WHOLE:
        if "gpu_count" in broken or size.gpu_count > template.max_gpu_count:
            errors.add(
                "gpu_count",
                f"Whole cards must be between 1 and {template.max_gpu_count} for {template.name} "
                f"(got {size.gpu_count}).",
            )
        # A whole card takes all its memory: no memory constraint (0) for the engine.
        gpu_count, gpu_milli, gpu_memory_mib = size.gpu_count, units.MILLI_PER_GPU, 0
        if not pool_models:
            errors.add("gpu_count", f"Pool {pool_name} has no healthy GPU.")
    elif mode == GpuMode.MIG:
        profile = size.mig_profile
        try:
            parsed = parse_mig_profile(profile)
        except MigProfileError as exc:
            errors.add("mig_profile", str(exc))
        else:
            refused = request_errors(
                quota.group.sharing, gpu_count=1, gpu_milli=0, mig_profile=profile
            )
            for messages in refused.values():
                errors.add("mig_profile", f"Pool {pool_name}: {messages[0]}")
            if not refused:
                gpu_count = 1
                gpu_milli = parsed.gpu_equivalent_milli
                gpu_memory_mib = parsed.memory_mib
    if mode in (GpuMode.SLICE, GpuMode.WHOLE):
        # The pool's sharing mode (quotas.sharing): e.g. no slices in an exclusive pool.
        refused = request_errors(quota.group.sharing, gpu_count=gpu_count, gpu_milli=gpu_milli)
        for messages in refused.values():
            errors.add(
                "gpu_percent" if mode == GpuMode.SLICE else "gpu_mode",
                f"Pool {pool_name}: {messages[0]}",
            )
    if own:
        errors.raise_if_any()
    return Resources(
        gpu_mode=mode,
        gpu_count=gpu_count,
        gpu_milli=gpu_milli,
        gpu_memory_mib=gpu_memory_mib,
        gpu_model=size.gpu_model if mode != GpuMode.NONE else "",
        cpu_milli=size.cpu_milli,
        memory_mib=size.memory_mib,
        gpu_models=gpu_models if mode != GpuMode.NONE else (),
        mig_profile=size.mig_profile if mode == GpuMode.MIG else "",
    )


def slice_models(
    template: CodespaceTemplate,
    quota: Quota,
    gpu_model: str,
    pool_models: list[pools.PoolGpuModel] | None = None,
) -> tuple[str, ...]:
    """The GPU models a slice of `template` in `quota`'s pool may be placed on: `gpu_model`, or with none
    the pool's models that neither the template (`whole_card_models`) nor the cluster
    (`TESSERA_WHOLE_CARD_ONLY_GPU_MODELS`) keeps whole. Raises InvalidInput naming `gpu_model`."""
    if pool_models is None:
        pool_models = pools.gpu_models_of_group(quota.group)
    return tuple(
        scheduling_services.models_for_slice(
            pool_models=[m.model for m in pool_models],
            gpu_models=(gpu_model,) if gpu_model else (),
            whole_card_only=set(template.whole_card_models or ())
            | scheduling_services.whole_card_only_models(),
            pool_name=quota.group.name,
            field="gpu_model",
        )
    )
