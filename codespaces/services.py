"""Codespace services: create, start, stop, delete, keep alive, the slice picker's preview, savings.

Pages and API call these same functions. Every state change goes through `codespaces.lifecycle`; the
scheduling service owns placement (`scheduling.services.submit_workload` / `release_workload`).
Refusals are `portal.errors` exceptions with the field at fault and the numbers.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from codespaces import lifecycle, pools
from codespaces.choices import (
    DELETABLE_STATES,
    PLACED_STATES,
    STARTABLE_STATES,
    STOPPABLE_STATES,
    CodespaceState,
    EventKind,
    GpuMode,
)
from codespaces.models import (
    MIB_PER_GIB,
    Codespace,
    CodespaceEvent,
    CodespaceTemplate,
    TemplatePreset,
)
from codespaces.requeue_notice import requeue_message
from portal.compiled_query import CompiledQuerySet, evaluate_together
from portal.db import (
    atomic_pipelined,
    insert,
    reserve_ids,
    reserve_ids_statement,
    reserved_ids,
)
from portal.errors import Conflict, InvalidInput
from portal.models import Tenant, dns_label_validator
from portal.numbers import parse_int
from portal.periodic import ItemFailures, run_each
from portal.scoping import is_operator, tenant_ids_for
from portal.transactions import in_one_transaction, retry_lost_races
from quotas import usage
from quotas.models import Quota
from scheduling import services as scheduling_services
from scheduling.choices import ACTIVE_STATES as WORKLOAD_ACTIVE_STATES
from scheduling.choices import WorkloadKind
from scheduling.models import Placement, PlacementGpu, Workload

logger = logging.getLogger(__name__)
T = TypeVar("T")
SLUG_PATTERN = re.compile(r"[-a-zA-Z0-9_]{1,63}")
S = CodespaceState


# --- What a user asks for ------------------------------------------------------------------------


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

    def scheduler_kwargs(self) -> dict[str, Any]:
        return {
            "cpu_milli": self.cpu_milli,
            "memory_mib": self.memory_mib,
            "gpu_count": self.gpu_count,
            "gpu_milli": self.gpu_milli,
            "gpu_memory_mib": self.gpu_memory_mib,
            "gpu_models": self.gpu_models,
        }


class _Errors:
    """Collects field errors so one refusal names every bad field."""

    def __init__(self) -> None:
        self.fields: dict[str, list[str]] = defaultdict(list)

    def add(self, name: str, message: str) -> None:
        self.fields[name].append(message)

    def raise_if_any(self) -> None:
        if self.fields:
            message = "; ".join(f"{name}: {errors[0]}" for name, errors in self.fields.items())
            raise InvalidInput(message, fields=dict(self.fields))


# --- Templates and quotas a user may use --------------------------------------------------------


def templates_for_tenant(tenant: Tenant | None) -> QuerySet[CodespaceTemplate]:
    """Active templates open to every tenant or to `tenant`."""
    queryset = CodespaceTemplate.objects.filter(active=True)
    if tenant is None:
        return queryset.filter(allowed_tenants__isnull=True).distinct()
    return (
        queryset.filter(allowed_tenants__isnull=True) | queryset.filter(allowed_tenants=tenant)
    ).distinct()


def templates_for_user(user: Any) -> QuerySet[CodespaceTemplate]:
    """Templates a user may see: all for operators; otherwise active ones open to one of their teams."""
    if is_operator(user):
        return CodespaceTemplate.objects.all()
    queryset = CodespaceTemplate.objects.filter(active=True)
    return (
        queryset.filter(allowed_tenants__isnull=True)
        | queryset.filter(allowed_tenants__in=tenant_ids_for(user))
    ).distinct()


def templates_overview() -> QuerySet[CodespaceTemplate]:
    """Every template (operators' page): presets, allowed teams, and `live` codespaces made from it."""
    return CodespaceTemplate.objects.prefetch_related("presets", "allowed_tenants").annotate(
        live=Count("codespaces", filter=~Q(codespaces__state__in=[S.DELETING, S.DELETED]))
    )


def quotas_for_tenant(tenant: Tenant) -> CompiledQuerySet:
    """The team's quotas with their pools, by pool name (compiled once: every create reads them)."""
    return _QUOTAS.filter(tenant_id=tenant.pk)


def _shown(value: Any) -> str:
    """User input safe to echo in an error (names only; anything else is not repeated back)."""
    text = str(value)
    return text if SLUG_PATTERN.fullmatch(text) else "(not a valid name)"


def _lookup(value: Any) -> dict[str, Any]:
    """A pk or name lookup for user input; anything that cannot be either matches nothing."""
    text = str(value)
    pk = parse_int(text, minimum=1)
    if pk is not None:
        return {"pk": pk}
    if SLUG_PATTERN.fullmatch(text):
        return {"name": text}
    return {"pk__in": []}


def default_quota(template: CodespaceTemplate | None, quotas: list[Quota]) -> Quota | None:
    """The quota the create page starts with: the first whose pool has the GPU model of the
    template's first GPU preset (so its headline size can start), else the first one."""
    if not quotas:
        return None
    wanted = [p.gpu_model for p in template.presets.all() if p.gpu_model] if template else []
    for model in wanted[:1]:
        for quota in quotas:
            if any(m.model == model for m in pools.gpu_models_of_group(quota.group)):
                return quota
    return quotas[0]


# The submit path's reads, compiled once per shape (portal.compiled_query).
_ALLOW_LIST = CodespaceTemplate.allowed_tenants.through.objects
_TEMPLATES = CompiledQuerySet(
    "codespaces.templates",
    CodespaceTemplate.objects.annotate(
        restricted=Exists(_ALLOW_LIST.filter(codespacetemplate_id=OuterRef("pk")))
    ),
)
_ALLOWED = CompiledQuerySet("codespaces.template-allowed", _ALLOW_LIST.values("tenant_id"))
_QUOTAS = CompiledQuerySet(
    "codespaces.quotas", Quota.objects.select_related("group").order_by("group__name", "pk")
)
_LIVE_OF_TEMPLATE = CompiledQuerySet(
    "codespaces.live-of-template", Codespace.objects.order_by().values("pk")
)


def _templates_named(template: CodespaceTemplate | int | str) -> CompiledQuerySet:
    """The (at most one) template a caller names, by instance, id or name, with its allow-list flag."""
    lookup = {"pk": template.pk} if isinstance(template, CodespaceTemplate) else _lookup(template)
    return _TEMPLATES.filter(**lookup).head()


def _resolve_template(
    template: CodespaceTemplate | int | str | None,
    tenant: Tenant,
    named: CompiledQuerySet | None = None,
) -> CodespaceTemplate:
    """The active template a caller names, if `tenant` may use it (`named`: its query, if the caller
    already evaluated it together with others); InvalidInput naming the field otherwise."""
    if template is None or template == "":
        raise InvalidInput(
            "template: choose a template.", fields={"template": ["Choose a template."]}
        )
    # The template and whether it has an allow-list, then (only if it has) whether the team is on it.
    found = next(iter(named if named is not None else _templates_named(template)), None)
    if found is None or not found.active:
        raise InvalidInput(
            f"template: there is no template {_shown(template)}.",
            fields={"template": [f"Unknown template {_shown(template)}."]},
        )
    if found.restricted and not list(
        _ALLOWED.filter(codespacetemplate_id=found.pk, tenant_id=tenant.pk)[:1]
    ):
        raise InvalidInput(
            f"template: '{found.name}' is not available to team {tenant.slug}.",
            fields={
                "template": [f"Template '{found.name}' is not available to team {tenant.slug}."]
            },
        )
    return found


def _resolve_quota(
    quota: Quota | int | None,
    tenant: Tenant,
    gpu_model: str,
    quotas_of_team: CompiledQuerySet | None = None,
) -> Quota:
    """The quota a caller names, or the team's first one able to run `gpu_model` (`quotas_of_team`:
    `quotas_for_tenant(tenant)`, if the caller already evaluated it together with others)."""
    quotas = list(quotas_of_team if quotas_of_team is not None else quotas_for_tenant(tenant))
    if not quotas:
        raise InvalidInput(
            f"quota: team {tenant.slug} has no quota to run codespaces; ask a platform operator.",
            fields={"quota": [f"Team {tenant.slug} has no quota."]},
        )
    if quota is not None and quota != "":
        wanted = quota.pk if isinstance(quota, Quota) else int(quota)
        for candidate in quotas:
            if candidate.pk == wanted:
                return candidate
        raise InvalidInput(
            f"quota: quota {quota!s} does not belong to team {tenant.slug}.",
            fields={"quota": [f"Quota {quota!s} is not one of team {tenant.slug}'s quotas."]},
        )
    if gpu_model:
        for candidate in quotas:
            if any(m.model == gpu_model for m in pools.gpu_models_of_group(candidate.group)):
                return candidate
    return quotas[0]


def validate_size(
    template: CodespaceTemplate, quota: Quota, size: SizeRequest, errors: _Errors | None = None
) -> Resources:
    """Check a size against the template's ranges and the quota's pool. Raises InvalidInput naming
    every bad field (compute %, GPU memory vs the largest GPU, whole-card-only models, ...)."""
    own = errors is None
    errors = errors or _Errors()
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
                f"Pool {pool_name} has no healthy {_shown(size.gpu_model)} GPU (it has: {have}).",
            )
    if not (template.min_cpu_milli <= size.cpu_milli <= template.max_cpu_milli):
        errors.add(
            "cpu_milli",
            f"CPU must be between {template.min_cpu_milli / 1000:g} and "
            f"{template.max_cpu_milli / 1000:g} cores for {template.name} "
            f"(got {size.cpu_milli / 1000:g}).",
        )
    if not (template.min_memory_mib <= size.memory_mib <= template.max_memory_mib):
        errors.add(
            "memory_mib",
            f"Memory must be between {template.min_memory_mib / MIB_PER_GIB:g} and "
            f"{template.max_memory_mib / MIB_PER_GIB:g} GiB for {template.name} "
            f"(got {size.memory_mib / MIB_PER_GIB:g} GiB).",
        )
    gpu_count, gpu_milli, gpu_memory_mib = 0, 0, 0
    gpu_models: tuple[str, ...] = (size.gpu_model,) if size.gpu_model else ()
    if mode == GpuMode.SLICE:
        if not (1 <= size.gpu_percent <= 100):
            errors.add(
                "gpu_percent",
                f"Compute must be between 1% and 100% of one GPU (got {size.gpu_percent}%).",
            )
        largest = pools.largest_gpu_memory_mib(quota.group, size.gpu_model)
        largest_gib = largest // MIB_PER_GIB
        if size.gpu_memory_gib < 1:
            errors.add(
                "gpu_memory_gib", f"GPU memory must be at least 1 GiB (got {size.gpu_memory_gib})."
            )
        elif size.gpu_memory_gib * MIB_PER_GIB > largest and "gpu_model" not in errors.fields:
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
            size.gpu_percent * 10,
            size.gpu_memory_gib * MIB_PER_GIB,
        )
    elif mode == GpuMode.WHOLE:
        if not (1 <= size.gpu_count <= template.max_gpu_count):
            errors.add(
                "gpu_count",
                f"Whole cards must be between 1 and {template.max_gpu_count} for {template.name} "
                f"(got {size.gpu_count}).",
            )
        # A whole card takes all its memory: no memory constraint (0) for the engine.
        gpu_count, gpu_milli, gpu_memory_mib = size.gpu_count, 1000, 0
        if not pool_models:
            errors.add("gpu_count", f"Pool {pool_name} has no healthy GPU.")
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


# --- Create / start / stop / delete / keep -------------------------------------------------------


def _submit(codespace: Codespace, pk: int | None = None) -> Any:
    """Create the scheduling workload of a codespace (PENDING; the cycle runs on commit), with the
    primary key `pk` when one was reserved. A slice with no model is restricted to the models that
    allow slices (`slice_models`, read again: the pool may have changed since the codespace was made)."""
    gpu_models: tuple[str, ...] = (codespace.gpu_model,) if codespace.gpu_model else ()
    if codespace.gpu_count == 1 and codespace.gpu_milli < 1000 and not codespace.gpu_model:
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
        gpu_count=codespace.gpu_count,
        gpu_milli=codespace.gpu_milli,
        gpu_memory_mib=codespace.gpu_memory_mib,
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
    errors = _Errors()
    try:
        dns_label_validator(name or "")
    except ValidationError:
        errors.add(
            "name",
            "Use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit.",
        )
    # The template and the team's quotas in one round trip.
    named = _templates_named(template) if template is not None and template != "" else None
    quotas_of_team = quotas_for_tenant(tenant)
    if named is not None:
        evaluate_together(named, quotas_of_team)
    template_obj = _resolve_template(template, tenant, named)
    preset_obj: TemplatePreset | None = None
    if preset not in (None, ""):
        if isinstance(preset, TemplatePreset):
            preset_obj = preset if preset.template_id == template_obj.pk else None
        else:
            preset_obj = template_obj.presets.filter(**_lookup(preset)).first()
        if preset_obj is None:
            raise InvalidInput(
                f"preset: {_shown(preset)} is not a size of template {template_obj.name}.",
                fields={"preset": [f"Unknown size {_shown(preset)} for {template_obj.name}."]},
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
    quota_obj = _resolve_quota(quota, tenant, size.gpu_model, quotas_of_team)
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
        cpu_milli=resources.cpu_milli,
        memory_mib=resources.memory_mib,
        home_gib=template.home_volume_gib,
        state=S.QUEUED,
        last_activity_at=timezone.now(),
    )
    if codespace.pk is None:
        # No ids to reserve (SQLite): the INSERT assigns the codespace's, which the workload needs (it
        # names the home volume after it), and one UPDATE links the workload afterwards.
        insert(codespace)
    workload = _submit(codespace, pk=workload_id)
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
        to_state=S.QUEUED,
        pk=event_id,
    )
    return codespace


def _as_one_transaction(codespace: Codespace, action: Callable[[], T], name: str) -> T:
    """Run a codespace action as one transaction, the outermost one (release_workload and
    submit_workload nest in it), run again from the start when it lost a lock race
    (`portal.transactions.retry_lost_races`; Busy → 503 when every attempt did). Each attempt starts
    from the codespace as the caller passed it: the in-memory changes of a lost attempt
    (`lifecycle.transition` sets the new state on the object) are undone with its rows."""
    fields = [f.attname for f in Codespace._meta.concrete_fields]
    before = {field_name: getattr(codespace, field_name) for field_name in fields}

    def restore() -> None:
        for field_name, value in before.items():
            setattr(codespace, field_name, value)

    def attempt() -> T:
        restore()
        return in_one_transaction(action)

    try:
        return retry_lost_races(attempt, name=name)
    except BaseException:
        restore()
        raise


def start_codespace(codespace: Codespace, *, actor: Any) -> Codespace:
    """Queue a stopped or failed codespace again (a new workload; the home volume is reused).

    Credits the GPU-hours an idle stop freed (cards' worth × time stopped) to `gpu_hours_freed`.
    One transaction, retried when it lost a lock race (`_as_one_transaction`).
    """
    if codespace.state not in STARTABLE_STATES:
        raise lifecycle.refuse_action(codespace, "start")
    return _as_one_transaction(
        codespace, lambda: _start(codespace, actor=actor), "codespaces.start_codespace"
    )


def _start(codespace: Codespace, *, actor: Any) -> Codespace:
    now = timezone.now()
    extra: dict[str, Any] = {}
    if codespace.idle_stopped_at is not None:
        hours = (now - codespace.idle_stopped_at).total_seconds() / 3600
        extra["gpu_hours_freed"] = codespace.gpu_hours_freed + hours * codespace.gpu_fraction
        extra["idle_stopped_at"] = None
    lifecycle.transition(
        codespace,
        S.QUEUED,
        message="Started again: queued for placement; the home volume is kept.",
        actor=actor,
        failure_reason="",
        pending_reason="",
        pending_code="",
        queue_position=None,
        idle_warned_at=None,
        last_activity_at=now,
        **extra,
    )
    workload = _submit(codespace)
    lifecycle.update_in_state(codespace, expected=S.QUEUED, workload=workload)
    return codespace


def _release(codespace: Codespace, *, reason: str, delete_home: bool) -> None:
    if codespace.workload_id is not None:
        scheduling_services.release_workload(
            codespace.workload_id, reason=reason, delete_home=delete_home
        )


def _cleared_placement() -> dict[str, Any]:
    return {
        "node_name": "",
        "gpu_names": "",
        "gpu_model_placed": "",
        "pending_reason": "",
        "pending_code": "",
        "queue_position": None,
        "idle_warned_at": None,
    }


def stop_codespace(
    codespace: Codespace,
    *,
    actor: Any,
    reason: str = "Stopped by its owner.",
    kind: str = EventKind.TRANSITION,
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> Codespace:
    """Stop: release the placement (the GPU share goes back to the pool), keep the home volume.

    QUEUED/PLACED/STARTING/RUNNING → STOPPING → STOPPED in one transaction, retried when it lost a
    lock race (`_as_one_transaction`).
    """
    if codespace.state not in STOPPABLE_STATES:
        raise lifecycle.refuse_action(codespace, "stop")

    def stop() -> Codespace:
        lifecycle.transition(codespace, S.STOPPING, message=reason, actor=actor)
        _release(codespace, reason=reason, delete_home=False)
        lifecycle.transition(
            codespace,
            S.STOPPED,
            message="Stopped; the placement is released and the home volume is kept.",
            actor=actor,
            kind=kind,
            data=data,
            stopped_at=timezone.now(),
            **_cleared_placement(),
            **fields,
        )
        return codespace

    return _as_one_transaction(codespace, stop, "codespaces.stop_codespace")


def delete_codespace(codespace: Codespace, *, actor: Any) -> Codespace:
    """Delete: release the placement and delete the home volume; DELETING → DELETED. One
    transaction, retried when it lost a lock race (`_as_one_transaction`)."""
    if codespace.state not in DELETABLE_STATES:
        raise lifecycle.refuse_action(codespace, "delete")

    def delete() -> Codespace:
        lifecycle.transition(
            codespace,
            S.DELETING,
            message="Deleting the codespace and its home volume.",
            actor=actor,
        )
        _release(codespace, reason="Codespace deleted.", delete_home=True)
        lifecycle.transition(
            codespace,
            S.DELETED,
            message="Deleted; the home volume is gone.",
            actor=actor,
            deleted_at=timezone.now(),
            **_cleared_placement(),
        )
        return codespace

    return _as_one_transaction(codespace, delete, "codespaces.delete_codespace")


def keep_codespace(codespace: Codespace, *, actor: Any) -> Codespace:
    """The owner's "keep it running": records activity and clears an idle warning."""
    if codespace.state != S.RUNNING:
        raise lifecycle.refuse_action(codespace, "keep")
    now = timezone.now()
    if not lifecycle.update_in_state(
        codespace, expected=S.RUNNING, last_activity_at=now, idle_warned_at=None
    ):
        raise lifecycle.StaleState(
            f"Codespace '{codespace.name}' is no longer running; reload the page.",
            fields={"state": ["Expected running."]},
        )
    lifecycle.record_event(
        codespace, EventKind.KEPT, "Kept running; the idle timer starts again.", actor=actor
    )
    return codespace


# --- Following the scheduling workload (observer callback) ---------------------------------------


def placement_summary(workload_id: int) -> dict[str, str]:
    """Node, GPU names and GPU model of a workload's active placement ({} when it has none)."""
    placement = (
        Placement.objects.filter(workload_id=workload_id, released_at__isnull=True)
        .select_related("node")
        .first()
    )
    if placement is None:
        return {}
    shares = list(
        PlacementGpu.objects.filter(placement=placement)
        .select_related("gpu")
        .order_by("gpu__index")
    )
    return {
        "node_name": placement.node.name,
        "gpu_names": ", ".join(f"gpu{share.gpu.index}" for share in shares),
        "gpu_model_placed": shares[0].gpu.model if shares else "",
    }


def sync_from_workloads(
    workload_ids: list[int] | tuple[int, ...], *, failures: ItemFailures | None = None
) -> int:
    """Map the state of each codespace's current workload onto the codespace (observer callback).

    PENDING → QUEUED with pending reason and queue position; PLACED → PLACED → STARTING; RUNNING →
    RUNNING; FAILED → FAILED with the reason; RELEASED/SUCCEEDED while the codespace was active (a
    reclaim) → STOPPED with a notice, home kept. Returns how many codespaces changed.
    Each codespace is synced on its own (`portal.periodic.run_each`): one that raises is logged with its
    id and counted in `failures`, and the others are still synced.
    """
    changed = 0
    codespaces = Codespace.objects.filter(workload_id__in=list(workload_ids)).select_related(
        "workload", "template", "owner", "tenant"
    )

    def sync(codespace: Codespace) -> None:
        nonlocal changed
        try:
            changed += int(_sync_one(codespace))
        except Conflict:
            # Someone else moved it first (user stop, idle task); their transition wins.
            logger.info("codespace %s changed while syncing; skipped", codespace.pk)

    run_each(codespaces, sync, task="codespace-sync", kind="codespace", failures=failures)
    return changed


def reconcile_codespaces(failures: ItemFailures | None = None) -> int:
    """Follow the workload of every active codespace (the observer's safety net, run on beat).
    Returns how many changed; codespaces whose sync raised are counted in `failures`."""
    ids = list(
        Codespace.objects.filter(state__in=(S.QUEUED, S.PLACED, S.STARTING, S.RUNNING))
        .exclude(workload__isnull=True)
        .values_list("workload_id", flat=True)
    )
    return sync_from_workloads(ids, failures=failures)


def _sync_one(codespace: Codespace) -> bool:
    workload = codespace.workload
    if workload is None or codespace.state not in (S.QUEUED, S.PLACED, S.STARTING, S.RUNNING):
        return False
    state = workload.state
    if state == "pending":
        changed = False
        if codespace.state != S.QUEUED:
            lifecycle.transition(
                codespace,
                S.QUEUED,
                message=requeue_message(
                    codespace,
                    workload.pk,
                    workload.failure_reason or workload.pending_reason or "capacity changed",
                ),
                kind=EventKind.NOTICE,
                **_cleared_placement(),
            )
            changed = True
        if (workload.pending_reason, workload.pending_code, workload.queue_position) != (
            codespace.pending_reason,
            codespace.pending_code,
            codespace.queue_position,
        ):
            reason_changed = workload.pending_reason != codespace.pending_reason
            lifecycle.update_in_state(
                codespace,
                expected=S.QUEUED,
                pending_reason=workload.pending_reason,
                pending_code=workload.pending_code,
                queue_position=workload.queue_position,
            )
            if reason_changed and workload.pending_reason:
                position = (
                    f" (position {workload.queue_position} in the queue)"
                    if workload.queue_position
                    else ""
                )
                lifecycle.record_event(
                    codespace,
                    EventKind.PENDING,
                    f"Waiting: {workload.pending_reason}{position}",
                    data={"code": workload.pending_code, "queue_position": workload.queue_position},
                )
            changed = True
        return changed
    if state in WORKLOAD_ACTIVE_STATES:
        before = codespace.state
        where = placement_summary(workload.pk)
        moved = where and (where["node_name"], where["gpu_names"]) != (
            codespace.node_name,
            codespace.gpu_names,
        )
        if codespace.state != S.QUEUED and moved:
            # Requeued and placed again between two notifications (GPU/node failure, drain):
            # show the detour instead of keeping a stale location.
            why = workload.failure_reason or (
                f"its placement on {codespace.location} was released (GPU or node failure, drain)"
            )
            lifecycle.transition(
                codespace,
                S.QUEUED,
                message=requeue_message(codespace, workload.pk, why),
                kind=EventKind.NOTICE,
                **_cleared_placement(),
            )
        if codespace.state == S.QUEUED:
            lifecycle.transition(
                codespace,
                S.PLACED,
                message=(
                    f"Placed on {where.get('node_name', '?')} {where.get('gpu_names', '')} "
                    f"{where.get('gpu_model_placed', '')}".strip()
                ),
                kind=EventKind.PLACED,
                data=where,
                pending_reason="",
                pending_code="",
                queue_position=None,
                **where,
            )
        if codespace.state == S.PLACED:
            lifecycle.transition(
                codespace,
                S.STARTING,
                message="Starting the container and mounting the home volume.",
            )
        if state == "running" and codespace.state == S.STARTING:
            now = timezone.now()
            lifecycle.transition(
                codespace,
                S.RUNNING,
                message="Running; connect with the web IDE or ssh.",
                started_at=now,
                last_activity_at=now,
                idle_warned_at=None,
            )
        return codespace.state != before
    if state == "failed":
        reason = workload.failure_reason or "the scheduler reported a failure"
        lifecycle.transition(
            codespace,
            S.FAILED,
            message=f"Failed: {reason}",
            kind=EventKind.FAILED,
            failure_reason=reason,
            **_cleared_placement(),
        )
        return True
    if state in ("released", "succeeded"):
        reason = workload.failure_reason or workload.pending_reason or "capacity was reclaimed"
        lifecycle.transition(codespace, S.STOPPING, message=f"Reclaimed by the scheduler: {reason}")
        lifecycle.transition(
            codespace,
            S.STOPPED,
            message=f"Stopped because the scheduler reclaimed its GPU ({reason}); "
            "the home volume is kept, start it again when you need it.",
            kind=EventKind.RECLAIMED,
            stopped_at=timezone.now(),
            **_cleared_placement(),
        )
        return True
    return False


# --- The slice picker: what fits now --------------------------------------------------------------


@dataclass
class PresetOption:
    preset: TemplatePreset
    starts_now: bool
    code: str
    reason: str
    node: str | None
    refused: str = ""  # the validation error when the preset cannot be used in this pool at all


@dataclass
class PickerData:
    """Everything the create page shows next to the size choice (computed server-side)."""

    quota: Quota
    headroom: dict[str, Any]
    largest_free_slice: tuple[int, int]
    gpu_models: list[pools.PoolGpuModel]
    options: list[PresetOption] = field(default_factory=list)

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
        "min_gpus": side.min.gpu_milli / 1000,
        "max_gpus": side.max.gpu_milli / 1000,
        "used_gpus": side.used.gpu_milli / 1000,
        "pending_gpus": side.pending.gpu_milli / 1000,
        "runtime_gpus": side.runtime.gpu_milli / 1000,
        "headroom_gpus": side.headroom.gpu_milli / 1000,
        "headroom_gpu_memory_gib": round(side.headroom.gpu_memory_mib / MIB_PER_GIB, 1),
    }


def preview(quota: Quota, resources: Resources) -> Any:
    """Would these resources start now on this quota? (scheduling.services.preview_request)."""
    return scheduling_services.preview_request(quota, **resources.scheduler_kwargs())


def picker_data(template: CodespaceTemplate, quota: Quota) -> PickerData:
    """Quota headroom, the pool's largest free slice, and per preset: starts now, or queues and why."""
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
        result = preview(quota, resources)
        data.options.append(
            PresetOption(preset, result.starts_now, result.code, result.reason, result.node)
        )
    return data


# --- Savings and listings -----------------------------------------------------------------------


@dataclass(frozen=True)
class Savings:
    """Whole cards codespaces would hold without slicing vs the cards their slices actually occupy."""

    codespaces: int
    cards_without_slicing: int
    cards_occupied: int
    gpu_hours_freed_by_idle_stop: float
    per_pool: list[dict[str, Any]]

    @property
    def cards_saved(self) -> int:
        return self.cards_without_slicing - self.cards_occupied

    @property
    def percent_saved(self) -> float:
        if not self.cards_without_slicing:
            return 0.0
        return round(100 * self.cards_saved / self.cards_without_slicing, 1)


def savings(now: datetime | None = None) -> Savings:
    """Compute savings over codespaces holding a placement now; GPU-hours freed include idle-stopped
    codespaces still stopped (cards' worth × time since the stop)."""
    now = now or timezone.now()
    placed = list(
        Codespace.objects.filter(state__in=PLACED_STATES)
        .exclude(gpu_mode=GpuMode.NONE)
        .exclude(workload__isnull=True)
        .select_related("quota__group")
    )
    per_pool: dict[str, dict[str, Any]] = {}
    for codespace in placed:
        pool = per_pool.setdefault(
            codespace.quota.group.name,
            {"pool": codespace.quota.group.name, "codespaces": 0, "without": 0, "gpus": set()},
        )
        pool["codespaces"] += 1
        pool["without"] += codespace.whole_cards_without_slicing
    gpu_rows = PlacementGpu.objects.filter(
        placement__released_at__isnull=True,
        placement__workload_id__in=[c.workload_id for c in placed],
    ).values_list("placement__workload_id", "gpu_id")
    pool_of_workload = {c.workload_id: c.quota.group.name for c in placed}
    for workload_id, gpu_id in gpu_rows:
        per_pool[pool_of_workload[workload_id]]["gpus"].add(gpu_id)
    rows = [
        {
            "pool": pool["pool"],
            "codespaces": pool["codespaces"],
            "cards_without_slicing": pool["without"],
            "cards_occupied": len(pool["gpus"]),
        }
        for pool in sorted(per_pool.values(), key=lambda p: p["pool"])
    ]
    freed = 0.0
    for codespace in Codespace.objects.exclude(state=S.DELETED).only(
        "gpu_hours_freed", "idle_stopped_at", "gpu_mode", "gpu_count", "gpu_milli", "state"
    ):
        freed += codespace.gpu_hours_freed
        if codespace.idle_stopped_at is not None and codespace.state == S.STOPPED:
            hours = (now - codespace.idle_stopped_at).total_seconds() / 3600
            freed += hours * codespace.gpu_fraction
    return Savings(
        codespaces=len(placed),
        cards_without_slicing=sum(r["cards_without_slicing"] for r in rows),
        cards_occupied=sum(r["cards_occupied"] for r in rows),
        gpu_hours_freed_by_idle_stop=round(freed, 2),
        per_pool=rows,
    )


def visible_codespaces(user: Any, *, scope: str = "mine") -> QuerySet[Codespace]:
    """Codespaces for a listing: "mine" (the user's own), "team" (teams the user administers; all for
    operators), "all" (operators only; others get their teams' rows)."""
    from portal.scoping import admin_tenant_ids_for, scope_queryset

    queryset = Codespace.objects.exclude(state=S.DELETED).select_related(
        "owner", "tenant", "template", "quota__group", "workload"
    )
    if scope == "mine":
        return queryset.filter(owner=user)
    if scope == "team":
        if is_operator(user):
            return queryset
        return queryset.filter(tenant_id__in=admin_tenant_ids_for(user))
    return scope_queryset(queryset, user)


def scoped_codespaces(user: Any, base: Any = None) -> Any:
    """Live codespaces of the user's tenants (all for operators): the base of every lookup. `base` is
    what to narrow (default: codespaces with their relations; the API list passes its compiled rows)."""
    from portal.scoping import scope_queryset

    if base is None:
        base = Codespace.objects.select_related(
            "owner", "tenant", "template", "quota__group", "workload", "preset"
        )
    return scope_queryset(base.exclude(state=S.DELETED), user)


# --- Templates (operators) -----------------------------------------------------------------------

TEMPLATE_FIELDS = (
    "name",
    "display_name",
    "image",
    "description",
    "home_volume_gib",
    "allow_custom",
    "allow_slices",
    "whole_card_models",
    "min_cpu_milli",
    "max_cpu_milli",
    "min_memory_mib",
    "max_memory_mib",
    "max_gpu_count",
    "idle_window_minutes",
    "idle_grace_minutes",
    "idle_threshold_percent",
    "max_per_user",
    "active",
)


def _check_template(template: CodespaceTemplate, presets: list[dict[str, Any]] | None) -> None:
    errors = _Errors()
    if template.min_cpu_milli > template.max_cpu_milli:
        errors.add("min_cpu_milli", "The CPU minimum is above the maximum.")
    if template.min_memory_mib > template.max_memory_mib:
        errors.add("min_memory_mib", "The memory minimum is above the maximum.")
    seen: set[str] = set()
    for index, preset in enumerate(presets or []):
        if preset.get("name") in seen:
            errors.add("presets", f"Preset {index + 1}: the name {preset['name']} is used twice.")
        seen.add(preset.get("name", ""))
        mode = preset.get("gpu_mode", GpuMode.SLICE)
        percent = preset.get("gpu_percent", 0)
        if mode == GpuMode.SLICE and not (1 <= percent <= 100):
            errors.add("presets", f"Preset {index + 1}: compute must be 1-100% (got {percent}%).")
        if mode == GpuMode.SLICE and preset.get("gpu_memory_gib", 0) < 1:
            errors.add("presets", f"Preset {index + 1}: a slice needs at least 1 GiB GPU memory.")
        if mode == GpuMode.WHOLE and preset.get("gpu_count", 0) < 1:
            errors.add("presets", f"Preset {index + 1}: whole cards need a count of at least 1.")
    try:
        template.full_clean(exclude=["allowed_tenants"], validate_unique=True)
    except ValidationError as exc:
        for name, messages in exc.message_dict.items():
            for text in messages:
                errors.add(name, text)
    errors.raise_if_any()


def _apply_template(
    template: CodespaceTemplate,
    presets: list[dict[str, Any]] | None,
    allowed_tenant_slugs: list[str] | None,
) -> None:
    if allowed_tenant_slugs is not None:
        tenants = list(Tenant.objects.filter(slug__in=allowed_tenant_slugs))
        missing = sorted(set(allowed_tenant_slugs) - {t.slug for t in tenants})
        if missing:
            raise InvalidInput(
                f"allowed_tenant_slugs: unknown teams {', '.join(missing)}.",
                fields={"allowed_tenant_slugs": [f"Unknown teams: {', '.join(missing)}."]},
            )
        template.allowed_tenants.set(tenants)
    if presets is not None:
        template.presets.all().delete()
        TemplatePreset.objects.bulk_create(
            TemplatePreset(template=template, **{"position": i, **preset})
            for i, preset in enumerate(presets)
        )


@transaction.atomic
def create_template(
    *,
    presets: list[dict[str, Any]] | None = None,
    allowed_tenant_slugs: list[str] | None = None,
    **fields: Any,
) -> CodespaceTemplate:
    """Create a template with its presets (operators)."""
    template = CodespaceTemplate(**{k: v for k, v in fields.items() if k in TEMPLATE_FIELDS})
    _check_template(template, presets)
    template.save()
    _apply_template(template, presets, allowed_tenant_slugs)
    return template


@transaction.atomic
def update_template(
    template: CodespaceTemplate,
    *,
    expected_version: int,
    presets: list[dict[str, Any]] | None = None,
    allowed_tenant_slugs: list[str] | None = None,
    **fields: Any,
) -> CodespaceTemplate:
    """Update a template (operators); compare-and-set on `version` so concurrent edits cannot be lost
    (PreconditionFailed with the current version otherwise). Presets, when given, replace the old ones."""
    from django.db.models import F

    from portal.api.concurrency import version_conflict

    for name, value in fields.items():
        if name in TEMPLATE_FIELDS:
            setattr(template, name, value)
    _check_template(template, presets)
    values = {name: getattr(template, name) for name in TEMPLATE_FIELDS}
    updated = CodespaceTemplate.objects.filter(pk=template.pk, version=expected_version).update(
        **values, version=F("version") + 1, updated_at=timezone.now()
    )
    if updated == 0:
        current = CodespaceTemplate.objects.values_list("version", flat=True).get(pk=template.pk)
        raise version_conflict(current)
    _apply_template(template, presets, allowed_tenant_slugs)
    template.refresh_from_db()
    return template


def retire_template(template: CodespaceTemplate) -> CodespaceTemplate:
    """Operators "delete" a template by retiring it (codespaces made from it keep working)."""
    CodespaceTemplate.objects.filter(pk=template.pk).update(
        active=False, version=template.version + 1
    )
    template.refresh_from_db()
    return template
