"""The create transaction: validate everything, then the codespace, its workload and its timeline entry
in one transaction (`create_codespace`); `submit_workload_for` also serves start."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.utils import timezone

from codespaces import lifecycle
from codespaces.choices import (
    CodespaceState,
    EventKind,
    GpuMode,
)
from codespaces.models import (
    Codespace,
    CodespaceEvent,
    CodespaceTemplate,
    TemplatePreset,
)
from codespaces.services.requests import (
    name_lookup,
    quotas_for_tenant,
    resolve_quota,
    resolve_template,
    shown,
    templates_named,
)
from codespaces.services.sizing import (
    FieldErrors,
    Resources,
    SizeRequest,
    slice_models,
    validate_size,
)
from core.units import MILLI_PER_GPU
from portal.compiled_query import CompiledQuerySet, evaluate_together
from portal.db import (
    atomic_pipelined,
    insert,
    reserve_ids,
    reserve_ids_statement,
    reserved_ids,
)
from portal.errors import InvalidInput
from portal.models import Tenant, dns_label_validator
from portal.transactions import retry_lost_races
from quotas.models import Quota
from scheduling import services as scheduling_services
from scheduling.choices import WorkloadKind
from scheduling.models import Workload

S = CodespaceState


# --- Create / start / stop / delete / keep -------------------------------------------------------


# The per-user limit's read, compiled once (portal.compiled_query).
_LIVE_OF_TEMPLATE = CompiledQuerySet(
    "codespaces.live-of-template", Codespace.objects.order_by().values("pk")
)


def submit_workload_for(codespace: Codespace, pk: int | None = None) -> Any:
    """Create the scheduling workload of a codespace (PENDING; the cycle runs on commit), with the
    primary key `pk` when one was reserved. A slice with no model is restricted to the models that
    allow slices (`slice_models`, read again: the pool may have changed since the codespace was made)."""
    gpu_models: tuple[str, ...] = (codespace.gpu_model,) if codespace.gpu_model else ()
    mig = codespace.gpu_mode == GpuMode.MIG
    if (
        not mig
        and codespace.gpu_count == 1
        and codespace.gpu_milli < MILLI_PER_GPU
        and not codespace.gpu_model
    ):
        gpu_models = slice_models(codespace.template, codespace.quota, "")
    return scheduling_services.submit_workload(
        pk=pk,
        tenant=codespace.tenant,
        quota=codespace.quota,
        kind=WorkloadKind.CODESPACE,
        name=codespace.name,
        owner=codespace.owner,
        cpu_milli=codespace.cpu_milli,
        memory_mib=codespace.memory_mib,
        # a MIG size names its profile; submit derives the instance's GPU-equivalent and memory
        gpu_count=0 if mig else codespace.gpu_count,
        gpu_milli=0 if mig else codespace.gpu_milli,
        gpu_memory_mib=0 if mig else codespace.gpu_memory_mib,
        mig_profile=codespace.mig_profile if mig else "",
        gpu_models=gpu_models,
        profile="development",
        image=codespace.image,
        preemptible=True,
        # Several whole cards: prefer one NVLink group / NUMA node, but do not wait for it.
        topology="preferred" if codespace.gpu_count > 1 else "none",
        # the home outlives each workload: stop keeps it, start mounts it again, delete removes it
        home_volume=codespace.home_volume_name,
        home_volume_gib=codespace.home_gib,
    )


def create_codespace(
    *,
    user: Any,
    tenant: Tenant,
    template: CodespaceTemplate | int | str | None,
    name: str,
    preset: TemplatePreset | int | str | None = None,
    size: SizeRequest | None = None,
    quota: Quota | int | None = None,
) -> Codespace:
    """Create a codespace and queue it for placement (state QUEUED, a new PENDING workload).

    Validates everything first and creates nothing on a refusal: unknown or forbidden template, bad
    name or a name clash, the per-user limit, compute % outside 1-100, GPU memory above the largest GPU
    in the pool, a slice on a whole-card-only model, CPU/memory outside the template's ranges.
    Locks the owner's row so two concurrent creates cannot both pass the per-user limit.
    """
    errors = FieldErrors()
    try:
        dns_label_validator(name or "")
    except ValidationError:
        errors.add(
            "name",
            "Use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit.",
        )
    # The template and the team's quotas in one round trip.
    named = templates_named(template) if template is not None and template != "" else None
    quotas_of_team = quotas_for_tenant(tenant)
    if named is not None:
        evaluate_together(named, quotas_of_team)
    template_obj = resolve_template(template, tenant, named)
    preset_obj: TemplatePreset | None = None
    if preset not in (None, ""):
        if isinstance(preset, TemplatePreset):
            preset_obj = preset if preset.template_id == template_obj.pk else None
        else:
            preset_obj = template_obj.presets.filter(**name_lookup(preset)).first()
        if preset_obj is None:
            raise InvalidInput(
                f"preset: {shown(preset)} is not a size of template {template_obj.name}.",
                fields={"preset": [f"Unknown size {shown(preset)} for {template_obj.name}."]},
            )
        size = SizeRequest.from_preset(preset_obj)
    elif size is None:
        raise InvalidInput(
            "preset: choose a size or enter a custom one.",
            fields={"preset": ["Choose a size or enter a custom one."]},
        )
    elif not template_obj.allow_custom:
        raise InvalidInput(
            f"preset: template {template_obj.name} only offers its listed sizes.",
            fields={"preset": [f"Template {template_obj.name} has no custom sizes; pick one."]},
        )
    quota_obj = resolve_quota(quota, tenant, size.gpu_model, quotas_of_team)
    resources = validate_size(template_obj, quota_obj, size, errors)
    errors.raise_if_any()

    # A name clash is left to the live-name unique constraint (no racy pre-check): the IntegrityError
    # rolls the whole transaction back and names the field.
    def create_locked() -> Codespace:
        with atomic_pipelined():
            return _create_locked(
                user, tenant, template_obj, preset_obj, quota_obj, resources, name
            )

    try:
        codespace = retry_lost_races(create_locked, name="create_codespace")
    except IntegrityError as exc:
        if not Codespace.objects.exclude(state=S.DELETED).filter(name=name).exists():
            raise
        raise InvalidInput(
            f"name: a codespace named '{name}' already exists; choose another name.",
            fields={"name": [f"A codespace named '{name}' already exists; choose another name."]},
        ) from exc
    return codespace


def _per_user_limit(template: CodespaceTemplate) -> InvalidInput:
    limit = template.max_per_user
    return InvalidInput(
        f"template: you already have {limit} codespaces from {template.name} "
        f"(limit {limit} per user); delete one first.",
        fields={"template": [f"Limit reached: {limit} of {limit} codespaces per user."]},
    )


def _create_locked(
    user: Any,
    tenant: Tenant,
    template: CodespaceTemplate,
    preset: TemplatePreset | None,
    quota: Quota,
    resources: Resources,
    name: str,
) -> Codespace:
    """The create transaction: the owner's row locked (two concurrent creates cannot both pass the
    per-user limit), the per-user limit, then the codespace, its workload and its timeline entry.

    Runs in `portal.db.atomic_pipelined`: on PostgreSQL three round trips, BEGIN included, where one
    statement each took eight: the lock (which also reserves the three new rows' ids) and the limit's
    query travel together, the limit's query running once the lock is held and seeing what the
    previous holder committed; the three INSERTs and the COMMIT go out together, each row written
    once, already linked (foreign keys are checked at commit), nothing read back."""
    limit = template.max_per_user
    if limit <= 0:
        raise _per_user_limit(template)
    # At the limit when the user's limit-th live codespace of this template exists: the database walks
    # at most `max_per_user` index entries and returns at most one row.
    limit_th = _LIVE_OF_TEMPLATE.filter(owner_id=user.pk, template_id=template.pk).exclude(
        state__in=[S.DELETING, S.DELETED]
    )[limit - 1 : limit]
    new_rows = [Codespace, Workload, CodespaceEvent]
    lock_and_ids = reserve_ids_statement(new_rows, lock=user)
    if lock_and_ids is None:  # no sequences (SQLite): the INSERTs assign the ids
        reserve_ids(new_rows, lock=user)
        codespace_id = workload_id = event_id = None
        at_limit = bool(list(limit_th))
    else:
        id_rows, limit_rows = evaluate_together(lock_and_ids, limit_th)
        codespace_id, workload_id, event_id = reserved_ids(id_rows, lock=user)
        at_limit = bool(limit_rows)
    if at_limit:
        raise _per_user_limit(template)
    codespace = Codespace(
        pk=codespace_id,
        name=name,
        owner=user,
        tenant=tenant,
        quota=quota,
        template=template,
        preset=preset,
        image=template.image,
        gpu_mode=resources.gpu_mode,
        gpu_count=resources.gpu_count,
        gpu_milli=resources.gpu_milli,
        gpu_memory_mib=resources.gpu_memory_mib,
        gpu_model=resources.gpu_model,
        mig_profile=resources.mig_profile,
        cpu_milli=resources.cpu_milli,
        memory_mib=resources.memory_mib,
        home_gib=template.home_volume_gib,
        state=lifecycle.INITIAL_STATE,
        last_activity_at=timezone.now(),
    )
    if codespace.pk is None:
        # No ids to reserve (SQLite): the INSERT assigns the codespace's, which the workload needs (it
        # names the home volume after it), and one UPDATE links the workload afterwards.
        insert(codespace)
    workload = submit_workload_for(codespace, pk=workload_id)
    codespace.workload = workload
    if codespace._state.adding:
        insert(codespace)
    else:
        Codespace.objects.filter(pk=codespace.pk).update(workload=workload)
    lifecycle.record_event(
        codespace,
        EventKind.CREATED,
        f"Created from {template.name} ({codespace.size_label}) on quota {quota}; "
        f"home volume {codespace.home_gib} GiB.",
        actor=user,
        to_state=lifecycle.INITIAL_STATE,
        pk=event_id,
    )
    return codespace
