"""Forms of the codespaces pages. They only shape input; `codespaces.services` validates and decides."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from codespaces.choices import GpuMode
from codespaces.models import (
    MAX_HOME_VOLUME_GIB,
    MAX_IDLE_MINUTES,
    MAX_MEMORY_MIB,
    MAX_PER_USER,
    MAX_PRESETS,
    CodespaceTemplate,
    TemplatePreset,
)
from codespaces.services import SIZE_INPUT_BOUNDS, TEMPLATE_FIELDS, SizeRequest
from core import units
from core.units import MIB_PER_GIB
from portal.numbers import BIGINT_MAX
from quotas.models import Quota

CUSTOM = "custom"
MAX_MEMORY_GIB = MAX_MEMORY_MIB // MIB_PER_GIB  # 64 TiB: far above any node, inside the MiB columns
# A typed size's bounds (`services.SIZE_INPUT_BOUNDS`, the API's too) in the pages' units.
MAX_CPU_CORES = units.milli_to_cores(SIZE_INPUT_BOUNDS["cpu_milli"][1])


def _size_field(name: str, **kwargs: Any) -> forms.IntegerField:
    """An optional integer field of a typed size, bounded by `SIZE_INPUT_BOUNDS[name]`."""
    low, high = SIZE_INPUT_BOUNDS[name]
    return forms.IntegerField(required=False, min_value=low, max_value=high, **kwargs)


# Service field names → the form field that shows the error.
SERVICE_FIELD_TO_FORM = {
    "cpu_milli": "cpu_cores",
    "memory_mib": "memory_gib",
    "state": None,
}


class CodespaceCreateForm(forms.Form):
    """Name, template, quota, and either a preset size or a custom one (GPU %, GiB, cards, CPU, RAM)."""

    name = forms.CharField(
        max_length=63,
        help_text="Lowercase letters, digits and '-'; it becomes part of the web IDE address.",
    )
    template = forms.ChoiceField()
    quota = forms.ChoiceField(help_text="The quota (pool) it is charged to.")
    preset = forms.ChoiceField(widget=forms.RadioSelect, required=True, label="Size")
    gpu_mode = forms.ChoiceField(choices=GpuMode.choices, initial=GpuMode.SLICE, required=False)
    gpu_percent = _size_field(
        "gpu_percent", initial=25, label="GPU compute (%)", help_text="1-100 % of one GPU"
    )
    gpu_memory_gib = _size_field("gpu_memory_gib", initial=20, label="GPU memory (GiB)")
    gpu_count = _size_field("gpu_count", initial=1, label="Whole GPUs")
    gpu_model = forms.ChoiceField(required=False, label="GPU model")
    mig_profile = forms.CharField(
        required=False,
        max_length=16,
        label="MIG profile",
        help_text="With a MIG instance, e.g. 1g.10gb",
    )
    cpu_cores = forms.DecimalField(
        required=False, initial=4, min_value=0, max_digits=6, decimal_places=1, label="CPU cores"
    )
    memory_gib = forms.IntegerField(
        required=False, initial=16, min_value=0, max_value=MAX_MEMORY_GIB, label="Memory (GiB)"
    )

    def __init__(
        self,
        *args: Any,
        templates: list[CodespaceTemplate],
        quotas: list[Quota],
        selected_template: CodespaceTemplate | None,
        gpu_models: list[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._choices("template", [(t.name, t.display_name) for t in templates])
        self._choices("quota", [(str(q.pk), f"{q.group.name} / {q.name}") for q in quotas])
        presets: list[tuple[str, str]] = []
        if selected_template is not None:
            presets = [(p.name, p.label) for p in selected_template.presets.all()]
            if selected_template.allow_custom:
                presets.append((CUSTOM, "Custom size"))
        self._choices("preset", presets)
        self._choices("gpu_model", [("", "Any model")] + [(m, m) for m in gpu_models])

    def _choices(self, name: str, choices: list[tuple[str, str]]) -> None:
        cast(forms.ChoiceField, self.fields[name]).choices = choices

    def size(self) -> SizeRequest:
        """The custom size in service units (only meaningful when preset == custom)."""
        return SizeRequest.from_page(self.cleaned_data)


class SizePreviewForm(forms.Form):
    """The picker's "check this custom size" body (JSON, in the page's units). The bounds only keep
    the numbers finite and storable; the service checks the template's ranges and names the field."""

    template = forms.CharField(max_length=63)
    quota = forms.IntegerField(required=False, min_value=1, max_value=BIGINT_MAX)
    gpu_mode = forms.ChoiceField(choices=GpuMode.choices, required=False)
    gpu_count = _size_field("gpu_count")
    gpu_percent = _size_field("gpu_percent")
    gpu_memory_gib = _size_field("gpu_memory_gib")
    gpu_model = forms.CharField(required=False, max_length=63)
    cpu_cores = forms.FloatField(required=False, min_value=0, max_value=MAX_CPU_CORES)
    memory_gib = forms.IntegerField(required=False, min_value=0, max_value=MAX_MEMORY_GIB)

    def size(self) -> SizeRequest:
        """The size in service units."""
        return SizeRequest.from_page(self.cleaned_data)


# --- Templates (operators) -------------------------------------------------------------------------

# Service field names → the template form's (the page speaks cores and GiB, the service milli and MiB).
TEMPLATE_FIELD_TO_FORM = {
    "min_cpu_milli": "min_cpu_cores",
    "max_cpu_milli": "max_cpu_cores",
    "min_memory_mib": "min_memory_gib",
    "max_memory_mib": "max_memory_gib",
    "allowed_tenant_slugs": "allowed_tenants",
    "presets": None,
}


def _cores(**kwargs: Any) -> forms.DecimalField:
    return forms.DecimalField(min_value=0, max_digits=6, decimal_places=1, **kwargs)


class TemplateForm(forms.Form):
    """What a template offers: image, size ranges, idle policy, the per-user limit, the teams that
    may use it, and the version the editor read (a concurrent save is refused, not overwritten)."""

    name = forms.SlugField(
        max_length=63, help_text="Lowercase letters, digits and '-'; developers and the API use it."
    )
    display_name = forms.CharField(max_length=120, label="Display name")
    image = forms.CharField(
        max_length=255, help_text="The container image, e.g. ghcr.io/org/img:tag"
    )
    description = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), max_length=2000
    )
    home_volume_gib = forms.IntegerField(
        min_value=1, max_value=MAX_HOME_VOLUME_GIB, initial=50, label="Home volume (GiB)"
    )
    allow_custom = forms.BooleanField(
        required=False, initial=True, label="Developers may pick their own size in the ranges"
    )
    allow_slices = forms.BooleanField(
        required=False, initial=True, label="GPU slices allowed (off: whole cards only)"
    )
    whole_card_models = forms.CharField(
        required=False,
        max_length=2000,
        label="Never sliced",
        help_text="GPU models given only as whole cards, comma-separated, e.g. T4, L4",
    )
    min_cpu_cores = _cores(initial=0.5, label="CPU cores, min")
    max_cpu_cores = _cores(initial=16, label="CPU cores, max")
    min_memory_gib = forms.IntegerField(
        min_value=0, max_value=MAX_MEMORY_GIB, initial=1, label="Memory (GiB), min"
    )
    max_memory_gib = forms.IntegerField(
        min_value=0, max_value=MAX_MEMORY_GIB, initial=128, label="Memory (GiB), max"
    )
    max_gpu_count = forms.IntegerField(
        min_value=0, max_value=16, initial=2, label="Whole GPUs, max"
    )
    idle_window_minutes = forms.IntegerField(
        min_value=1, max_value=MAX_IDLE_MINUTES, initial=60, label="Idle warning after (minutes)"
    )
    idle_grace_minutes = forms.IntegerField(
        min_value=1,
        max_value=MAX_IDLE_MINUTES,
        initial=15,
        label="Stopped after the warning (minutes)",
    )
    idle_threshold_percent = forms.IntegerField(
        min_value=0, max_value=100, initial=5, label="Idle below GPU utilization (%)"
    )
    max_per_user = forms.IntegerField(
        min_value=1, max_value=MAX_PER_USER, initial=3, label="Codespaces per developer, max"
    )
    allowed_tenants = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Teams",
        help_text="None ticked: every team may use it.",
    )
    defrag_movable = forms.BooleanField(
        required=False,
        initial=True,
        label="Defragmentation may move its codespaces (when idle or with the owner's consent)",
    )
    active = forms.BooleanField(
        required=False, initial=True, label="Offered to developers (off: retired)"
    )
    version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    def __init__(
        self,
        *args: Any,
        template: CodespaceTemplate | None = None,
        tenant_slugs: list[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.MultipleChoiceField, self.fields["allowed_tenants"]).choices = [
            (slug, slug) for slug in tenant_slugs
        ]
        if template is not None:
            initial = {
                name: getattr(template, name) for name in self.fields if hasattr(template, name)
            }
            initial.update(
                whole_card_models=", ".join(template.whole_card_models or []),
                min_cpu_cores=units.milli_to_cores(template.min_cpu_milli),
                max_cpu_cores=units.milli_to_cores(template.max_cpu_milli),
                min_memory_gib=template.min_memory_mib // MIB_PER_GIB,
                max_memory_gib=template.max_memory_mib // MIB_PER_GIB,
                allowed_tenants=[t.slug for t in template.allowed_tenants.all()],
            )
            for name, value in initial.items():
                self.initial.setdefault(name, value)

    def values(self) -> dict[str, Any]:
        """The template's fields in service units (`TEMPLATE_FIELDS`: those the form holds as they are,
        the rest converted)."""
        data = self.cleaned_data
        models = [m.strip() for m in (data.get("whole_card_models") or "").split(",")]
        return {
            **{name: data[name] for name in TEMPLATE_FIELDS if name in self.fields},
            "whole_card_models": [m for m in models if m],
            "min_cpu_milli": units.cores_to_milli(data["min_cpu_cores"]),
            "max_cpu_milli": units.cores_to_milli(data["max_cpu_cores"]),
            "min_memory_mib": units.gib_to_mib(data["min_memory_gib"]),
            "max_memory_mib": units.gib_to_mib(data["max_memory_gib"]),
        }


class PresetForm(forms.Form):
    """One named size of a template, in cores and GiB."""

    name = forms.SlugField(max_length=63)
    label = forms.CharField(max_length=120, help_text='What developers read, e.g. "1/4 H100"')
    # A MIG preset names its profile; the picker offers it where the pool shares by MIG (elsewhere it is
    # listed as refused, with the reason).
    gpu_mode = forms.ChoiceField(choices=GpuMode.choices, initial=GpuMode.SLICE, label="GPU")
    gpu_percent = forms.IntegerField(
        required=False, min_value=0, max_value=100, label="Compute (%)"
    )
    gpu_memory_gib = forms.IntegerField(
        required=False, min_value=0, max_value=1024, label="GPU memory (GiB)"
    )
    gpu_count = forms.IntegerField(required=False, min_value=0, max_value=16, label="Cards")
    mig_profile = forms.CharField(
        required=False, max_length=16, label="MIG profile", help_text="e.g. 1g.10gb (MIG presets)"
    )
    gpu_model = forms.CharField(required=False, max_length=63, label="Model")
    cpu_cores = _cores(initial=2, label="CPU cores")
    memory_gib = forms.IntegerField(
        min_value=0, max_value=MAX_MEMORY_GIB, initial=8, label="Memory (GiB)"
    )

    def values(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "label": data["label"],
            "gpu_mode": data["gpu_mode"],
            "gpu_percent": data.get("gpu_percent") or 0,
            "gpu_memory_gib": data.get("gpu_memory_gib") or 0,
            "gpu_count": data.get("gpu_count") or 0,
            "mig_profile": data.get("mig_profile") or "",
            "gpu_model": data.get("gpu_model") or "",
            "cpu_milli": units.cores_to_milli(data["cpu_cores"]),
            "memory_mib": units.gib_to_mib(data["memory_gib"]),
        }

    @staticmethod
    def initial_for(preset: TemplatePreset) -> dict[str, Any]:
        return {
            "name": preset.name,
            "label": preset.label,
            "gpu_mode": preset.gpu_mode,
            "gpu_percent": preset.gpu_percent,
            "gpu_memory_gib": preset.gpu_memory_gib,
            "gpu_count": preset.gpu_count,
            "mig_profile": preset.mig_profile,
            "gpu_model": preset.gpu_model,
            "cpu_cores": units.milli_to_cores(preset.cpu_milli),
            "memory_gib": preset.memory_mib // MIB_PER_GIB,
        }


PresetFormSet = forms.formset_factory(
    PresetForm, extra=2, can_delete=True, max_num=MAX_PRESETS, validate_max=True
)


def preset_values(formset: forms.BaseFormSet) -> list[dict[str, Any]]:
    """The presets a valid formset keeps, in order: the template's own rows unless ticked for
    deletion, and the blank rows the operator filled in."""
    kept = []
    for index, form in enumerate(formset.forms):
        if form in formset.deleted_forms:
            continue
        if index < formset.initial_form_count() or form.has_changed():
            kept.append(form.values())
    return kept
