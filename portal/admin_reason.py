"""Admin bulk actions that stop or move other people's work ask for the operator's reason first, on an
intermediate page (Django's own pattern: the action renders a form carrying the selected ids, the
resubmitted form runs the action). The reason follows the one rule (`portal.operator_log.clean_reason`)
and goes to the same services as the pages and the API, so the audit trail and the users' timelines
read the operator's words, not a fixed sentence."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from portal.errors import InvalidInput
from portal.operator_log import MAX_REASON_LENGTH, clean_reason

APPLY = "apply"
# Objects named on the page at most (the count is always whole).
MAX_LISTED = 50


class AdminReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=MAX_REASON_LENGTH,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60, "maxlength": MAX_REASON_LENGTH}),
        help_text="Shown to the users whose work this moves, and kept in the audit trail.",
    )

    def __init__(self, *args: Any, reason_required: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reason_required = reason_required
        self.fields["reason"].label = "Reason" if reason_required else "Reason (optional)"

    def clean_reason(self) -> str:
        try:
            return clean_reason(self.cleaned_data.get("reason"), required=self.reason_required)
        except InvalidInput as exc:
            raise forms.ValidationError(exc.fields["reason"]) from exc


def reason_or_page(
    modeladmin: Any,
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    action: str,
    title: str,
    what: str,
    required: bool = True,
) -> str | TemplateResponse:
    """The reason the operator typed on the intermediate page (the action then runs), or that page:
    first shown, or shown again with the field's error (nothing done)."""
    form = AdminReasonForm(
        request.POST if APPLY in request.POST else None, reason_required=required
    )
    if form.is_bound and form.is_valid():
        return str(form.cleaned_data["reason"])
    objects = list(queryset[:MAX_LISTED])
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "what": what,
        "form": form,
        "action": action,
        "objects": objects,
        "pks": list(queryset.values_list("pk", flat=True)),
        "count": queryset.count(),
        "opts": modeladmin.model._meta,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "apply": APPLY,
    }
    return TemplateResponse(
        request, "admin/operator_reason.html", context, status=400 if form.is_bound else 200
    )
