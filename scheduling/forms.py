"""Forms of the cluster pages: submitting a gang job, operator reasons."""

from __future__ import annotations

from typing import Any

from django import forms

from core.placement import POLICIES
from portal.errors import DomainError, InvalidInput
from portal.forms import UnitField
from portal.models import Tenant
from portal.operator_log import clean_reason
from quotas.models import Quota, QuotaGroup
from quotas.sharing import MAX_MIG_PROFILES, MAX_TIMESLICE_REPLICAS, SharingMode
from scheduling.choices import GangTopologyMode
from scheduling.limits import MAX_REASON_LENGTH
from scheduling.models import Gpu
from scheduling.services.trace_upload import MAX_TRACE_BYTES


class JobForm(forms.Form):
    """A gang job: `pods` identical pods, at least `min_available` placed together or none."""

    name = forms.SlugField(max_length=63, help_text="Lowercase letters, digits and dashes.")
    quota = forms.ModelChoiceField(queryset=Quota.objects.none())
    pods = forms.IntegerField(min_value=1, max_value=512, initial=2)
    min_available = forms.IntegerField(
        min_value=1, required=False, help_text="Empty = all pods must be placed together."
    )
    # People type cores, GiB and % of a GPU; the cleaned values are the milli / MiB the services keep.
    cpu_milli = UnitField(
        "cores", minimum=0.001, maximum=1024, initial=4000, label="CPU cores per pod"
    )
    memory_mib = UnitField(
        "gib", minimum=0.001, maximum=16384, initial=16384, label="Memory (GiB) per pod"
    )
    gpu_count = forms.IntegerField(min_value=0, max_value=16, initial=1, label="GPUs per pod")
    gpu_milli = UnitField(
        "percent",
        minimum=0,
        maximum=100,
        initial=1000,
        label="Share of each GPU (%)",
        help_text="100 % = whole cards; below 100 % = a slice of one GPU.",
    )
    gpu_memory_mib = UnitField(
        "gib", maximum=1024, initial=0, label="GPU memory (GiB) per slice", required=False
    )
    timeout_seconds = forms.IntegerField(min_value=1, max_value=604800, initial=600)
    priority = forms.IntegerField(min_value=-1000, max_value=1000, initial=0)
    preemptible = forms.BooleanField(required=False, initial=True)
    topology_level = forms.CharField(
        max_length=32,
        required=False,
        label="Keep all pods in one",
        help_text="A topology level of the pool (rack, block, nvlink; see the cluster page); empty = anywhere.",
    )
    topology_mode = forms.ChoiceField(
        choices=GangTopologyMode.choices, initial=GangTopologyMode.REQUIRED, required=False
    )

    def __init__(self, *args: Any, quotas: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["quota"].queryset = quotas  # type: ignore[attr-defined]

    def add_domain_error(self, exc: DomainError) -> None:
        """Show a service refusal next to the field it names (members[0].gpu_milli → gpu_milli)."""
        placed = False
        for key, errors in exc.fields.items():
            name = key.rsplit(".", 1)[-1]
            if name in self.fields:
                self.add_error(name, errors)
                placed = True
        if not placed:
            self.add_error(None, exc.message)


class ReasonForm(forms.Form):
    """The reason of an operator action (`portal.operator_log.clean_reason`: trimmed, bounded, and
    required for cordon, drain and marking a GPU unhealthy)."""

    reason = forms.CharField(
        max_length=MAX_REASON_LENGTH,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "maxlength": MAX_REASON_LENGTH}),
        help_text="Shown to the users whose work this moves, and kept in the audit trail.",
    )

    def __init__(self, *args: Any, reason_required: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reason_required = reason_required
        field = self.fields["reason"]
        field.widget.attrs["required"] = reason_required
        field.label = "Reason" if reason_required else "Reason (optional)"

    def clean_reason(self) -> str:
        try:
            return clean_reason(self.cleaned_data.get("reason"), required=self.reason_required)
        except InvalidInput as exc:
            raise forms.ValidationError(exc.fields["reason"]) from exc


class WhatIfForm(forms.Form):
    """The what-if planner's change (`scheduling.services.whatif.WhatIfChange`), bounded."""

    group = forms.ModelChoiceField(queryset=QuotaGroup.objects.order_by("name"), label="Node pool")
    days = forms.IntegerField(min_value=1, max_value=90, initial=30, label="Last days of demand")
    add_model = forms.ChoiceField(required=False, label="Add nodes of GPU model")
    add_count = forms.IntegerField(min_value=0, max_value=500, initial=0, label="How many")
    remove_model = forms.ChoiceField(required=False, label="Remove nodes of GPU model")
    remove_count = forms.IntegerField(min_value=0, max_value=500, initial=0, label="How many")
    policy = forms.ChoiceField(
        choices=[("", "as configured"), *((p, p) for p in POLICIES)],
        required=False,
        label="Placement policy",
    )
    sharing_mode = forms.ChoiceField(
        choices=[("", "as it is"), *SharingMode.choices],
        required=False,
        label="Sharing mode of the pool",
    )
    mig_profiles = forms.CharField(
        max_length=200,
        required=False,
        label="MIG profiles (mig mode)",
        help_text="Comma-separated, e.g. 1g.10gb, 3g.40gb",
    )
    timeslice_replicas = forms.IntegerField(
        min_value=1,
        max_value=MAX_TIMESLICE_REPLICAS,
        initial=1,
        required=False,
        label="Replicas per GPU (timeslice mode)",
    )
    trace = forms.FileField(
        required=False,
        label="Or an uploaded trace (openb pod-list CSV)",
        help_text=f"At most {MAX_TRACE_BYTES // 1_000_000} MB; replaces the recorded demand.",
    )

    #: Prefix of the per-team cap fields (`team_gpus_vision`): a number per known team, not free text.
    TEAM_CAP_PREFIX = "team_gpus_"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """The GPU models to add or remove are the inventory's; each team gets its own optional cap."""
        super().__init__(*args, **kwargs)
        models = list(
            Gpu.objects.exclude(model="")
            .order_by("model")
            .values_list("model", flat=True)
            .distinct()
        )
        for name in ("add_model", "remove_model"):
            field = self.fields[name]
            field.choices = [("", "—"), *((m, m) for m in models)]  # type: ignore[attr-defined]
            field.error_messages["invalid_choice"] = f"One of: {', '.join(models) or 'none'}."
        for slug in Tenant.objects.order_by("slug").values_list("slug", flat=True):
            self.fields[f"{self.TEAM_CAP_PREFIX}{slug}"] = forms.IntegerField(
                min_value=0,
                max_value=100_000,
                required=False,
                label=f"GPU cap of {slug}",
                help_text="GPUs the team may hold at once (empty: no cap)",
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        cleaned["team_gpus"] = {
            name.removeprefix(self.TEAM_CAP_PREFIX): value
            for name, value in cleaned.items()
            if name.startswith(self.TEAM_CAP_PREFIX) and value is not None
        }
        return cleaned

    def clean_mig_profiles(self) -> tuple[str, ...]:
        raw = self.cleaned_data.get("mig_profiles") or ""
        profiles = tuple(p.strip() for p in raw.split(",") if p.strip())
        if len(profiles) > MAX_MIG_PROFILES:
            raise forms.ValidationError(f"At most {MAX_MIG_PROFILES} profiles.")
        return profiles
