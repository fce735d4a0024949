"""Forms of the quota pages. They only parse input; quotas.services validates and saves."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from portal.forms import UnitField
from portal.models import Tenant
from quotas.models import RESOURCE_FIELDS, Quota, QuotaGroup
from quotas.resources import Side

# The unit each dimension is typed in (the form converts once, through portal.numbers).
UNIT_OF = {
    "gpu_milli": "gpus",
    "gpu_memory_mib": "gib",
    "cpu_milli": "cores",
    "memory_mib": "gib",
}
UNIT_HELP = {
    "gpu_milli": "GPUs (0.5 = half of one GPU's compute)",
    "gpu_memory_mib": "GiB of GPU memory",
    "cpu_milli": "CPU cores (0.5 = half a core)",
    "memory_mib": "GiB of memory",
}
DIMENSION_LABELS = {
    "gpu_milli": "GPU",
    "gpu_memory_mib": "GPU memory",
    "cpu_milli": "CPU",
    "memory_mib": "Memory",
}


def resource_rows() -> list[tuple[Side, str, str, str]]:
    """(side, dimension label, min field name, max field name) in display order."""
    return [
        (side, DIMENSION_LABELS[d], f"{side.value}_min_{d}", f"{side.value}_max_{d}")
        for side in (Side.GPU, Side.CPU)
        for d in side.dimensions
    ]


class QuotaForm(forms.Form):
    """Min/max per side and dimension, weight, lending, and the version the editor read."""

    shared_weight = forms.IntegerField(
        required=False,
        label="Shared weight",
        help_text="Share of idle capacity relative to siblings; empty = this quota's max.",
    )
    lend_idle_min = forms.BooleanField(
        required=False, initial=True, label="Lend my idle min to sibling quotas"
    )
    note = forms.CharField(
        required=False, max_length=500, label="Note for the history", help_text="Why this change?"
    )
    version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, quota: Quota | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for side in (Side.GPU, Side.CPU):
            for dimension in side.dimensions:
                for bound in ("min", "max"):
                    name = f"{side.value}_{bound}_{dimension}"
                    field = UnitField(
                        UNIT_OF[dimension],
                        required=True,
                        initial=0,
                        label=f"{side.label} {bound} {DIMENSION_LABELS[dimension]}",
                        help_text=UNIT_HELP[dimension],
                    )
                    field.widget.attrs["data-dimension"] = dimension
                    self.fields[name] = field
        if quota is not None:
            for name in (*RESOURCE_FIELDS, "shared_weight", "lend_idle_min"):
                self.initial.setdefault(name, getattr(quota, name))
            self.initial.setdefault("version", quota.version)

    def values(self) -> dict[str, Any]:
        """The quota fields to hand to the service."""
        return {
            name: self.cleaned_data.get(name)
            for name in (*RESOURCE_FIELDS, "shared_weight", "lend_idle_min")
        }


class NewQuotaForm(QuotaForm):
    """A new quota in a group: which tenant, and its name (default: the tenant's slug)."""

    tenant = forms.ModelChoiceField(queryset=Tenant.objects.order_by("slug"), to_field_name="slug")
    name = forms.SlugField(required=False, max_length=63, help_text="Default: the tenant's slug.")

    field_order = ["tenant", "name"]


class GroupForm(forms.Form):
    """A quota group: a pool of nodes selected by labels."""

    name = forms.SlugField(max_length=63)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    node_selector = forms.CharField(
        required=False,
        label="Node selector (JSON)",
        help_text='Labels every node of the pool carries, e.g. {"pool": "training"}.',
    )
    allow_overcommitted_min = forms.BooleanField(
        required=False, label="Allow the quotas' mins to add up to more than the capacity"
    )
    note = forms.CharField(required=False, max_length=500)
    version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, group: QuotaGroup | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if group is not None:
            self.fields["name"].disabled = True
            self.initial.update(
                name=group.name,
                description=group.description,
                node_selector=json.dumps(group.node_selector),
                allow_overcommitted_min=group.allow_overcommitted_min,
                version=group.version,
            )

    def clean_node_selector(self) -> dict[str, Any]:
        raw = (self.cleaned_data.get("node_selector") or "").strip()
        if not raw:
            return {}
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc.msg}.") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError('Use a JSON object, e.g. {"pool": "training"}.')
        return value
