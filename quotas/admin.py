"""Admin back office for quotas. Every change goes through quotas.services, so the lock, the version check
and the QuotaChange audit row happen exactly as from the pages and the API.

The admin forms run the service's validation in `clean()` (errors appear next to the fields and nothing is
written); `save_model` then calls the service, which validates again under the locks. Should a concurrent
edit slip in between, the service refuses and the admin shows the error instead of saving.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.api.concurrency import version_conflict
from portal.errors import DomainError
from quotas import services
from quotas.models import (
    EDITABLE_QUOTA_FIELDS,
    RESOURCE_FIELDS,
    Quota,
    QuotaChange,
    QuotaGroup,
)


def _form_errors(form: forms.BaseForm, error: DomainError) -> None:
    placed = False
    for field, problems in (error.fields or {}).items():
        for problem in problems if isinstance(problems, list) else [problems]:
            form.add_error(field if field in form.fields else None, str(problem))
            placed = True
    if not placed:
        form.add_error(None, error.message)


class QuotaAdminForm(forms.ModelForm):
    expected_version = forms.IntegerField(widget=forms.HiddenInput, required=False)
    note = forms.CharField(required=False, max_length=500, help_text="Recorded in the history.")

    class Meta:
        model = Quota
        fields = ["group", "tenant", "name", *EDITABLE_QUOTA_FIELDS]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["expected_version"].initial = self.instance.version
            for name in ("group", "tenant", "name"):
                if name in self.fields:
                    self.fields[name].disabled = True

    def _post_clean(self) -> None:
        # Run the service's checks on the proposed values instead of saving anything here.
        super()._post_clean()  # type: ignore[misc]
        if self.errors:
            return
        values = {name: self.cleaned_data.get(name) for name in EDITABLE_QUOTA_FIELDS}
        try:
            values = services.clean_quota_values(values)
            if self.instance.pk:
                current = Quota.objects.get(pk=self.instance.pk)
                expected = self.cleaned_data.get("expected_version")
                if expected is not None and expected != current.version:
                    raise version_conflict(current.version)
                proposed = services.unsaved_quota(current, values)
                group = current.group
            else:
                proposed = services.unsaved_quota(None, values)
                group = self.cleaned_data["group"]
                proposed.name = self.cleaned_data.get("name") or self.cleaned_data["tenant"].slug
                proposed.tenant = self.cleaned_data["tenant"]
            services.validate_quota(group, proposed)
        except DomainError as error:
            _form_errors(self, error)


class QuotaGroupAdminForm(forms.ModelForm):
    expected_version = forms.IntegerField(widget=forms.HiddenInput, required=False)
    note = forms.CharField(required=False, max_length=500)

    class Meta:
        model = QuotaGroup
        fields = ["name", "description", "node_selector", "allow_overcommitted_min"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["expected_version"].initial = self.instance.version
            self.fields["name"].disabled = True


@admin.register(QuotaGroup)
class QuotaGroupAdmin(admin.ModelAdmin):
    form = QuotaGroupAdminForm
    list_display = ("name", "node_selector", "allow_overcommitted_min", "version", "updated_at")
    search_fields = ("name", "description")
    readonly_fields = ("version", "created_at", "updated_at")
    show_full_result_count = False

    def save_model(self, request: HttpRequest, obj: QuotaGroup, form: Any, change: bool) -> None:
        data = form.cleaned_data
        try:
            if change:
                saved = services.update_group(
                    obj.pk,
                    expected_version=data.get("expected_version"),
                    actor=request.user,
                    note=data.get("note", ""),
                    description=data["description"],
                    node_selector=data["node_selector"],
                    allow_overcommitted_min=data["allow_overcommitted_min"],
                )
            else:
                saved = services.create_group(
                    name=data["name"],
                    description=data["description"],
                    node_selector=data["node_selector"],
                    allow_overcommitted_min=data["allow_overcommitted_min"],
                    actor=request.user,
                    note=data.get("note", ""),
                )
        except DomainError as error:
            self.message_user(request, f"Not saved: {error.message}", messages.ERROR)
            return
        obj.pk = saved.obj.pk
        obj.version = saved.obj.version
        for warning in saved.warnings:
            self.message_user(request, warning, messages.WARNING)

    def delete_model(self, request: HttpRequest, obj: QuotaGroup) -> None:
        try:
            services.delete_group(obj, expected_version=None, actor=request.user)
        except DomainError as error:
            self.message_user(request, f"Not deleted: {error.message}", messages.ERROR)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[QuotaGroup]) -> None:
        for group in list(queryset):
            self.delete_model(request, group)


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    form = QuotaAdminForm
    list_display = (
        "name",
        "group",
        "tenant",
        "gpu_min_gpu_milli",
        "gpu_max_gpu_milli",
        "cpu_min_cpu_milli",
        "cpu_max_cpu_milli",
        "lend_idle_min",
        "version",
    )
    list_filter = ("group",)
    list_select_related = ("group", "tenant")
    search_fields = ("name", "tenant__slug", "group__name")
    readonly_fields = ("version", "created_at", "updated_at")
    show_full_result_count = False
    fieldsets = (
        (None, {"fields": ("group", "tenant", "name", "version", "expected_version", "note")}),
        ("GPU side", {"fields": [f for f in RESOURCE_FIELDS if f.startswith("gpu_")]}),
        ("CPU side", {"fields": [f for f in RESOURCE_FIELDS if f.startswith("cpu_")]}),
        ("Sharing", {"fields": ("shared_weight", "lend_idle_min")}),
    )

    def save_model(self, request: HttpRequest, obj: Quota, form: Any, change: bool) -> None:
        data = form.cleaned_data
        values = {name: data.get(name) for name in EDITABLE_QUOTA_FIELDS}
        try:
            if change:
                saved = services.update_quota(
                    obj.pk,
                    expected_version=data.get("expected_version"),
                    actor=request.user,
                    note=data.get("note", ""),
                    **values,
                )
            else:
                saved = services.create_quota(
                    group=data["group"],
                    tenant=data["tenant"],
                    name=data.get("name") or None,
                    actor=request.user,
                    note=data.get("note", ""),
                    **values,
                )
        except DomainError as error:
            self.message_user(request, f"Not saved: {error.message}", messages.ERROR)
            return
        obj.pk = saved.obj.pk
        obj.version = saved.obj.version
        for warning in saved.warnings:
            self.message_user(request, warning, messages.WARNING)

    def delete_model(self, request: HttpRequest, obj: Quota) -> None:
        try:
            services.delete_quota(obj, expected_version=None, actor=request.user)
        except DomainError as error:
            self.message_user(request, f"Not deleted: {error.message}", messages.ERROR)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Quota]) -> None:
        for quota in list(queryset):
            self.delete_model(request, quota)


@admin.register(QuotaChange)
class QuotaChangeAdmin(admin.ModelAdmin):
    """The audit trail: read-only."""

    list_display = ("created_at", "subject_name", "action", "actor", "version", "note")
    list_filter = ("action", "subject")
    list_select_related = ("actor",)
    search_fields = ("subject_name", "note", "actor__username")
    readonly_fields = [f.name for f in QuotaChange._meta.fields]
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
