"""Templates (operators): create, update (compare-and-set on `version`), retire."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from codespaces.choices import (
    GpuMode,
)
from codespaces.delete_preview import template_retire_impact
from codespaces.models import (
    CodespaceTemplate,
    TemplatePreset,
)
from codespaces.services.sizing import FieldErrors, size_rule_violations
from core.units import is_mig_profile
from portal.api.concurrency import version_conflict
from portal.choices import OperatorActionKind, OperatorTargetKind
from portal.errors import InvalidInput
from portal.models import Tenant
from portal.operator_log import clean_reason, record_operator_action

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
    "defrag_movable",
    "active",
)


def _check_template(template: CodespaceTemplate, presets: list[dict[str, Any]] | None) -> None:
    errors = FieldErrors()
    if template.min_cpu_milli > template.max_cpu_milli:
        errors.add("min_cpu_milli", "The CPU minimum is above the maximum.")
    if template.min_memory_mib > template.max_memory_mib:
        errors.add("min_memory_mib", "The memory minimum is above the maximum.")
    seen: set[str] = set()
    for index, preset in enumerate(presets or []):
        if preset.get("name") in seen:
            errors.add("presets", f"Preset {index + 1}: the name {preset['name']} is used twice.")
        seen.add(preset.get("name", ""))
        percent = preset.get("gpu_percent", 0)
        broken = size_rule_violations(
            preset.get("gpu_mode", GpuMode.SLICE),
            gpu_percent=percent,
            gpu_memory_gib=preset.get("gpu_memory_gib", 0),
            gpu_count=preset.get("gpu_count", 0),
        )
        if "gpu_percent" in broken:
            errors.add("presets", f"Preset {index + 1}: compute must be 1-100% (got {percent}%).")
        if "gpu_memory_gib" in broken:
            errors.add("presets", f"Preset {index + 1}: a slice needs at least 1 GiB GPU memory.")
        if "gpu_count" in broken:
            errors.add("presets", f"Preset {index + 1}: whole cards need a count of at least 1.")
        profile = preset.get("mig_profile", "")
        is_mig = preset.get("gpu_mode") == GpuMode.MIG
        if is_mig and not is_mig_profile(profile):
            errors.add(
                "presets",
                f"Preset {index + 1}: a MIG preset names a profile such as 1g.10gb "
                f"(got {str(profile)[:40]!r}).",
            )
        elif not is_mig and profile:
            errors.add("presets", f"Preset {index + 1}: only a MIG preset names a MIG profile.")
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


@transaction.atomic
def retire_template(
    template: CodespaceTemplate, *, actor: Any = None, reason: str = ""
) -> CodespaceTemplate:
    """Operators "delete" a template by retiring it (codespaces made from it keep working). Audited in
    the operators' activity log with the confirmation's impact sentence and the (optional) reason;
    retiring a retired template changes nothing and records nothing."""
    reason = clean_reason(reason, required=False)
    locked = CodespaceTemplate.objects.select_for_update().get(pk=template.pk)
    if locked.active:
        impact = template_retire_impact(locked)
        CodespaceTemplate.objects.filter(pk=locked.pk).update(
            active=False, version=F("version") + 1, updated_at=timezone.now()
        )
        record_operator_action(
            actor=actor,
            action=OperatorActionKind.TEMPLATE_RETIRE,
            target_kind=OperatorTargetKind.TEMPLATE,
            target_id=locked.pk,
            target_name=locked.name,
            impact=impact,
            reason=reason,
        )
    template.refresh_from_db()
    return template
