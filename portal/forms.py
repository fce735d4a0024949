"""Forms of the portal's own pages, and how every page puts a service's refusal on its form."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from core import units
from portal.errors import DomainError
from portal.login_throttle import LoginRefused, admit_attempt, attempt_succeeded, client_address
from portal.operator_log import MAX_FILTER_LENGTH, LogFilters, action_choices


def show_domain_error(
    form: forms.BaseForm, error: DomainError, field_map: Mapping[str, str | None] | None = None
) -> None:
    """Put a service's refusal on the form: each problem under the form field it names (service
    names renamed through `field_map`; None or a name the form lacks: form-wide), and the refusal's
    message form-wide when it names no field."""
    placed = False
    for name, problems in (error.fields or {}).items():
        target = (field_map or {}).get(name, name)
        for problem in problems if isinstance(problems, list) else [problems]:
            form.add_error(target if target in form.fields else None, str(problem))
            placed = True
    if not placed:
        form.add_error(None, error.message)


def stale_edit_message(kind: str, obj: Any) -> str:
    """The form error of an edit that lost the compare-and-set on `version` to someone else's."""
    current = type(obj).objects.filter(pk=obj.pk).values_list("version", flat=True).first()
    return (
        f"Someone else saved this {kind} first (it is now at version {current}). Your edit was not "
        "saved: reload the page to see their change, then apply yours again."
    )


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What will use it, e.g. 'notebook' or 'ci'.")
    expires_at = forms.DateTimeField(
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="Optional. Leave empty for the default expiry.",
    )
    never_expires = forms.BooleanField(
        required=False, help_text="Operators only: a token that does not expire."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["expires_at"].help_text = (
            f"Optional. Leave empty for {settings.TESSERA_TOKEN_DEFAULT_DAYS} days; at most "
            f"{settings.TESSERA_TOKEN_MAX_DAYS} days (operators may go further)."
        )


class TenantSwitchForm(forms.Form):
    tenant = forms.IntegerField()


class _ThrottledSignIn(AuthenticationForm):
    """A sign-in form whose attempts pass `portal.login_throttle` first: while the (username, address)
    pair or the address is locked out, or the address must wait before trying that username again, the
    password is not even checked (a form-wide error says when to come back)."""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is None or not password:
            return super().clean()
        address = "" if self.request is None else client_address(self.request)
        try:
            admit_attempt(username, address)
        except LoginRefused as refused:
            raise ValidationError(refused.message, code="locked_out") from refused
        cleaned = super().clean()  # a wrong password raises here: the attempt stays counted
        attempt_succeeded(username, address)
        return cleaned


class LoginForm(_ThrottledSignIn):
    """The portal's login page."""


class AdminLoginForm(_ThrottledSignIn, AdminAuthenticationForm):
    """The admin's login page (staff only), with the same lockout."""


class ActivityFilterForm(forms.Form):
    """Filters of the operators' activity log (page and API): who, what, which target, when."""

    actor = forms.CharField(max_length=MAX_FILTER_LENGTH, required=False, label="Operator")
    action = forms.ChoiceField(choices=[("", "any action"), *action_choices()], required=False)
    target = forms.CharField(
        max_length=MAX_FILTER_LENGTH,
        required=False,
        help_text="Node, GPU, codespace, quota or token name (contains).",
    )
    since = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}), label="From"
    )
    until = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}), label="Until"
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and until <= since:
            self.add_error("until", "Must be after From.")
        return data

    def filters(self) -> LogFilters:
        """The validated filters (call after is_valid())."""
        d = self.cleaned_data
        return LogFilters(
            actor=d.get("actor", "").strip(),
            action=d.get("action", ""),
            target=d.get("target", "").strip(),
            since=d.get("since"),
            until=d.get("until"),
        )


class UnitField(forms.Field):
    """A resource amount typed in people's units (GPUs, % of a GPU, cores, GiB) whose cleaned value
    is the exact integer the services keep (milli or MiB); conversion in `core.units`. An initial
    value given as that integer is shown in the unit."""

    def __init__(
        self, unit: str, *, minimum: float = 0, maximum: float = 10**6, **kwargs: Any
    ) -> None:
        self.unit = unit
        self.minimum = minimum
        self.maximum = maximum
        places = units.UNITS[unit][1]
        attrs = {"inputmode": "decimal", "step": str(Decimal(1).scaleb(-places)),
                 "min": units.format_number(minimum), "max": units.format_number(maximum),
                 "data-unit": unit}  # fmt: skip
        kwargs.setdefault("widget", forms.NumberInput(attrs=attrs))
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return units.from_base(value, self.unit)
        return value

    def to_python(self, value: Any) -> int | None:  # type: ignore[override]
        text = value.strip() if isinstance(value, str) else value
        if text in self.empty_values:
            return None
        if len(str(text)) > 32:
            raise ValidationError("Enter a shorter number.", code="invalid")
        try:
            return units.to_base(text, self.unit, minimum=self.minimum, maximum=self.maximum)
        except units.UnitError as exc:
            raise ValidationError(str(exc), code="invalid") from exc
