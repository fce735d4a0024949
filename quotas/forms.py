"""Forms of the quota pages. They only parse input; quotas.services validates and saves."""

from __future__ import annotations

from typing import Any

from django import forms

from portal.forms import UnitField
from portal.labels import MAX_LABEL_NAME_LENGTH, MAX_LABEL_PREFIX_LENGTH, MAX_LABEL_VALUE_LENGTH
from portal.models import Tenant
from portal.operator_log import MAX_REASON_LENGTH
from quotas.fairness import MAX_HALF_LIFE_HOURS
from quotas.models import (
    MAX_MIN_RUNTIME_SECONDS,
    MAX_RECLAIM_NOTICE_SECONDS,
    RESOURCE_FIELDS,
    Quota,
    QuotaGroup,
)
from quotas.notice_board import MAX_BOARD_LIMIT, MAX_FILTER_LENGTH, STATE_CHOICES
from quotas.resources import Side
from quotas.sharing import MAX_TIMESLICE_REPLICAS, MODE_NOTES, SharingMode

# The unit each dimension is typed in (the form converts once, through core.units).
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


# Rows of the node-selector builder (key = value pairs a node must all carry).
SELECTOR_ROWS = 6


class SelectorRowsForm(forms.Form):
    """The node-selector builder: up to SELECTOR_ROWS `key = value` rows, keys and values offered from
    the inventory (datalists; the JS narrows values to the chosen key). `selector()` is the dict.
    Also parses the live preview's query string, so page and preview read rows the same way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for i in range(SELECTOR_ROWS):
            self.fields[f"selector_key_{i}"] = forms.CharField(
                required=False,
                max_length=MAX_LABEL_PREFIX_LENGTH + 1 + MAX_LABEL_NAME_LENGTH,
                label=f"Label {i + 1}",
                widget=forms.TextInput(
                    attrs={"list": "label-keys", "data-selector-key": i, "autocomplete": "off"}
                ),
            )
            self.fields[f"selector_value_{i}"] = forms.CharField(
                required=False,
                max_length=MAX_LABEL_VALUE_LENGTH,
                label=f"Value {i + 1}",
                widget=forms.TextInput(
                    attrs={"list": "label-values", "data-selector-value": i, "autocomplete": "off"}
                ),
            )

    def selector_rows(self) -> list[tuple[forms.BoundField, forms.BoundField]]:
        return [
            (self[f"selector_key_{i}"], self[f"selector_value_{i}"]) for i in range(SELECTOR_ROWS)
        ]

    def initial_rows(self, selector: dict[str, Any]) -> None:
        for i, (key, value) in enumerate(sorted(selector.items())[:SELECTOR_ROWS]):
            self.initial[f"selector_key_{i}"] = key
            self.initial[f"selector_value_{i}"] = value

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        selector: dict[str, str] = {}
        row_of: dict[str, int] = {}
        for i in range(SELECTOR_ROWS):
            key = (data.get(f"selector_key_{i}") or "").strip()
            value = (data.get(f"selector_value_{i}") or "").strip()
            if not key and not value:
                continue
            if not key:
                self.add_error(f"selector_key_{i}", "Choose the label this value is for.")
            elif not value:
                self.add_error(f"selector_value_{i}", f"Give label {key} a value.")
            elif key in selector:
                self.add_error(
                    f"selector_key_{i}", f"Label {key} is already in row {row_of[key] + 1}."
                )
            else:
                selector[key] = value
                row_of[key] = i
        data["node_selector"] = selector
        return data

    def selector(self) -> dict[str, str]:
        """The node selector the rows spell (call after is_valid())."""
        return dict(self.cleaned_data.get("node_selector", {}))


class GroupForm(SelectorRowsForm):
    """A quota group: a pool of nodes selected by labels (the builder's rows)."""

    name = forms.SlugField(max_length=63)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    allow_overcommitted_min = forms.BooleanField(
        required=False, label="Allow the quotas' mins to add up to more than the capacity"
    )
    fair_share_half_life_hours = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_HALF_LIFE_HOURS,
        label="Decayed fair share half-life (hours; empty = off)",
        help_text="e.g. 168: last week's GPU-hours count half when borrowed GPUs are shared out.",
    )
    min_runtime_seconds = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_MIN_RUNTIME_SECONDS,
        label="Minimum runtime before preemption (seconds; 0 = off)",
    )
    reclaim_notice_seconds = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_RECLAIM_NOTICE_SECONDS,
        label="Polite reclaim: notice before borrowed work is stopped (seconds; 0 = at once)",
        help_text="e.g. 300: borrowed work gets five minutes, its checkpoint hook (set per quota, "
        "on the quota page) and a signal before it is stopped; codespaces are suspended, home kept.",
    )
    sharing_mode = forms.ChoiceField(
        required=False,
        choices=SharingMode.choices,
        initial=SharingMode.SLICE,
        label="GPU sharing",
        help_text=" ".join(f"{SharingMode(m).label}: {note}" for m, note in MODE_NOTES.items()),
    )
    mig_profiles = forms.CharField(
        required=False,
        max_length=200,
        label="MIG profiles offered",
        help_text="MIG pools only, comma-separated, e.g. 1g.10gb, 3g.40gb.",
    )
    timeslice_replicas = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_TIMESLICE_REPLICAS,
        initial=1,
        label="Replicas per GPU",
        help_text="Time-sliced pools only (2 to 16); replicas have no memory isolation.",
    )
    note = forms.CharField(required=False, max_length=500)
    version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    def clean_sharing_mode(self) -> str:
        """Left out of a post: the group's mode (a new group: ``slice``)."""
        value = self.cleaned_data.get("sharing_mode")
        if value:
            return str(value)
        return self._group.sharing_mode if self._group else SharingMode.SLICE

    def clean_mig_profiles(self) -> list[str]:
        """``"1g.10gb, 3g.40gb"`` -> ``["1g.10gb", "3g.40gb"]`` (the service checks each name); left out of a
        post: the group's list."""
        if "mig_profiles" not in self.data and self._group is not None:
            return list(self._group.mig_profiles or [])
        text = self.cleaned_data.get("mig_profiles") or ""
        return [part.strip() for part in text.split(",") if part.strip()]

    def clean_reclaim_notice_seconds(self) -> int:
        """Left out of a post: the group's countdown (a new group: 0); empty: 0 (stop at once)."""
        if "reclaim_notice_seconds" not in self.data:
            return self._group.reclaim_notice_seconds if self._group else 0
        return int(self.cleaned_data.get("reclaim_notice_seconds") or 0)

    def clean_timeslice_replicas(self) -> int:
        """Left out of a post: the group's replicas (a new group: 1)."""
        value = self.cleaned_data.get("timeslice_replicas")
        if value is not None:
            return int(value)
        return self._group.timeslice_replicas if self._group else 1

    def __init__(self, *args: Any, group: QuotaGroup | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._group = group
        if group is not None:
            self.fields["name"].disabled = True
            self.initial.update(
                name=group.name,
                description=group.description,
                allow_overcommitted_min=group.allow_overcommitted_min,
                fair_share_half_life_hours=group.fair_share_half_life_hours,
                min_runtime_seconds=group.min_runtime_seconds,
                reclaim_notice_seconds=group.reclaim_notice_seconds,
                sharing_mode=group.sharing_mode,
                mig_profiles=", ".join(group.mig_profiles or []),
                timeslice_replicas=group.timeslice_replicas,
                version=group.version,
            )
            self.initial_rows(group.node_selector or {})

    def other_fields(self) -> list[forms.BoundField]:
        """The fields that are not builder rows, in order."""
        return [f for f in self if not f.name.startswith("selector_")]


class QuotaDeleteForm(forms.Form):
    """The quota delete confirmation: an optional note for the history, the version seen."""

    note = forms.CharField(
        required=False,
        max_length=MAX_REASON_LENGTH,
        label="Note (optional, kept in the history and the activity log)",
    )
    version = forms.IntegerField(widget=forms.HiddenInput, required=False)


class GroupDeleteForm(forms.Form):
    """The quota group delete confirmation: an optional reason for the audit trail, the version seen."""

    reason = forms.CharField(
        required=False,
        max_length=MAX_REASON_LENGTH,
        label="Reason (optional, kept in the history and the activity log)",
    )
    version = forms.IntegerField(widget=forms.HiddenInput, required=False)


class NoticeBoardForm(forms.Form):
    """Filters of the reclaim-notices board. It only bounds the input; quotas.notice_board.board_query
    resolves the group and the quota (unknown ones come back as errors on their fields)."""

    state = forms.ChoiceField(choices=STATE_CHOICES, required=False)
    group = forms.CharField(
        max_length=MAX_FILTER_LENGTH,
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "name or id"}),
    )
    quota = forms.CharField(
        max_length=20, required=False, label="Quota id", widget=forms.TextInput()
    )
    limit = forms.IntegerField(
        min_value=1, max_value=MAX_BOARD_LIMIT, required=False, label="Rows per page"
    )
