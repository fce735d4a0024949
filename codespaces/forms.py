"""Forms of the codespaces pages. They only shape input; `codespaces.services` validates and decides."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from codespaces.choices import GpuMode
from codespaces.models import CodespaceTemplate
from quotas.models import Quota

CUSTOM = "custom"

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
    gpu_percent = forms.IntegerField(
        required=False, initial=25, label="GPU compute (%)", help_text="1-100 % of one GPU"
    )
    gpu_memory_gib = forms.IntegerField(required=False, initial=20, label="GPU memory (GiB)")
    gpu_count = forms.IntegerField(required=False, initial=1, min_value=0, label="Whole GPUs")
    gpu_model = forms.ChoiceField(required=False, label="GPU model")
    cpu_cores = forms.DecimalField(
        required=False, initial=4, min_value=0, max_digits=6, decimal_places=1, label="CPU cores"
    )
    memory_gib = forms.IntegerField(required=False, initial=16, min_value=0, label="Memory (GiB)")

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

    def size_fields(self) -> dict[str, Any]:
        """The custom size in service units (only meaningful when preset == custom)."""
        data = self.cleaned_data
        cores = data.get("cpu_cores")
        return {
            "gpu_mode": data.get("gpu_mode") or GpuMode.SLICE,
            "gpu_count": data.get("gpu_count") or 0,
            "gpu_percent": data.get("gpu_percent") or 0,
            "gpu_memory_gib": data.get("gpu_memory_gib") or 0,
            "gpu_model": data.get("gpu_model") or "",
            "cpu_milli": int((cores or 0) * 1000),
            "memory_mib": int(data.get("memory_gib") or 0) * 1024,
        }
