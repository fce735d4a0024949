"""The slice picker's read model: what fits now, per preset and for a custom size."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codespaces import pools
from codespaces.models import CodespaceTemplate, TemplatePreset
from codespaces.services.requests import resolve_quota, resolve_template
from codespaces.services.sizing import Resources, SizeRequest, validate_size
from core import units
from portal.errors import InvalidInput
from portal.models import Tenant
from quotas import usage
from quotas.models import Quota
from scheduling import services as scheduling_services

# --- The slice picker: what fits now --------------------------------------------------------------


@dataclass
class PresetOption:
    preset: TemplatePreset
    starts_now: bool
    code: str
    reason: str
    node: str | None
    refused: str = ""  # the validation error when the preset cannot be used in this pool at all


@dataclass(frozen=True)
class MigOption:
    """One MIG profile of the pool as the picker offers it, with where it would start now."""

    profile: str
    starts_now: bool
    node: str | None
    sentence: str  # "1g.10gb: hard isolation, starts now on h100-03"


@dataclass
class PickerData:
    """Everything the create page shows next to the size choice (computed server-side)."""

    quota: Quota
    headroom: dict[str, Any]
    largest_free_slice: tuple[int, int]
    gpu_models: list[pools.PoolGpuModel]
    options: list[PresetOption] = field(default_factory=list)
    mig_options: list[MigOption] = field(default_factory=list)

    @property
    def largest_free_gpu_milli(self) -> int:
        return self.largest_free_slice[0]

    @property
    def largest_free_gpu_memory_mib(self) -> int:
        return self.largest_free_slice[1]


def quota_headroom(quota: Quota) -> dict[str, Any]:
    """The GPU-side numbers of a quota from the quota tree's snapshot, in cards and GiB."""
    snapshot = usage.group_snapshot(quota.group)
    try:
        entry = snapshot.quota(quota.pk)
    except KeyError:
        return {}
    side = entry.gpu
    return {
        "min_gpus": side.min.gpu_milli / units.MILLI_PER_GPU,
        "max_gpus": side.max.gpu_milli / units.MILLI_PER_GPU,
        "used_gpus": side.used.gpu_milli / units.MILLI_PER_GPU,
        "pending_gpus": side.pending.gpu_milli / units.MILLI_PER_GPU,
        "runtime_gpus": side.runtime.gpu_milli / units.MILLI_PER_GPU,
        "headroom_gpus": side.headroom.gpu_milli / units.MILLI_PER_GPU,
        "headroom_gpu_memory_gib": round(units.mib_to_gib(side.headroom.gpu_memory_mib), 1),
    }


def preview(quota: Quota, resources: Resources, owner: Any = None) -> Any:
    """Would these resources start now on this quota for `owner` (the person who would create it, so
    the quota's per-person limit applies)? (scheduling.services.preview_request)."""
    return scheduling_services.preview_request(quota, owner=owner, **resources.scheduler_kwargs())


def picker_data(template: CodespaceTemplate, quota: Quota, owner: Any = None) -> PickerData:
    """Quota headroom, the pool's largest free slice, and per preset: starts now, or queues and why,
    for `owner` (the person choosing: the quota's per-person limit counts what they hold)."""
    data = PickerData(
        quota=quota,
        headroom=quota_headroom(quota),
        largest_free_slice=tuple(scheduling_services.largest_free_slice(quota.group)),  # type: ignore[arg-type]
        gpu_models=pools.gpu_models_of_group(quota.group),
    )
    for preset in template.presets.all():
        try:
            resources = validate_size(template, quota, SizeRequest.from_preset(preset))
        except InvalidInput as exc:
            data.options.append(
                PresetOption(preset, False, "invalid", exc.message, None, refused=exc.message)
            )
            continue
        result = preview(quota, resources, owner)
        data.options.append(
            PresetOption(preset, result.starts_now, result.code, result.reason, result.node)
        )
    data.mig_options = mig_options(template, quota, owner)
    return data


def mig_options(template: CodespaceTemplate, quota: Quota, owner: Any = None) -> list[MigOption]:
    """The pool's MIG profiles (a `mig` pool; none elsewhere), each with where it starts now or why it
    would queue, at the template's smallest CPU and memory."""
    options = []
    for profile in quota.group.sharing.mig_profiles if quota.group.sharing_mode == "mig" else ():
        size = SizeRequest(
            gpu_mode="mig",
            mig_profile=profile,
            cpu_milli=template.min_cpu_milli,
            memory_mib=template.min_memory_mib,
        )
        try:
            result = preview(quota, validate_size(template, quota, size), owner)
        except InvalidInput as exc:
            options.append(MigOption(profile, False, None, f"{profile}: {exc.message}"))
            continue
        where = (
            f"starts now on {result.node}" if result.starts_now else f"would queue: {result.reason}"
        )
        options.append(
            MigOption(
                profile, result.starts_now, result.node, f"{profile}: hard isolation, {where}"
            )
        )
    return options


def picker_for(
    tenant: Tenant,
    template: CodespaceTemplate | int | str,
    quota: Quota | int | None,
    owner: Any = None,
) -> PickerData:
    """`picker_data` for what a caller names: the template if `tenant` may use it, the quota if it is
    one of the team's (default: the first). InvalidInput naming the field otherwise."""
    template_obj = resolve_template(template, tenant)
    return picker_data(template_obj, resolve_quota(quota, tenant, ""), owner)


@dataclass(frozen=True)
class SizePreview:
    """The picker's answer for one custom size: the quota it was checked against and the scheduler's
    preview (starts now, or the code and reason it would queue with)."""

    quota: Quota
    result: Any


def preview_size(
    tenant: Tenant,
    *,
    template: CodespaceTemplate | int | str | None,
    quota: Quota | int | None,
    size: SizeRequest,
    owner: Any = None,
) -> SizePreview:
    """Would `size` start now? Resolves the template and quota a caller names (the quota defaults to the
    team's first able to run `size.gpu_model`), validates the size (InvalidInput naming every bad
    field) and asks the scheduler. Creates nothing."""
    template_obj = resolve_template(template, tenant)
    quota_obj = resolve_quota(quota, tenant, size.gpu_model)
    resources = validate_size(template_obj, quota_obj, size)
    return SizePreview(quota=quota_obj, result=preview(quota_obj, resources, owner))
