from __future__ import annotations

from django import forms
from django.utils import timezone


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What will use it, e.g. 'notebook' or 'ci'.")
    expires_at = forms.DateTimeField(
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="Optional. Leave empty for a token that does not expire.",
    )

    def clean_expires_at(self):  # type: ignore[no-untyped-def]
        value = self.cleaned_data.get("expires_at")
        if value is not None and value <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return value


class TenantSwitchForm(forms.Form):
    tenant = forms.IntegerField()
