"""Confirm, then act: the one shape of every destructive page action (delete a quota, a group, a codespace
template).

GET shows the confirmation (`portal/confirm.html`: what will happen, the form's fields such as a reason).
POST with a valid form runs the service call, shows its success message and redirects; a refusal the
service raises (`DomainError`: in use, stale version) is shown as a message on the refused page, nothing
changed. POST with an invalid form shows the confirmation again with the field errors (HTTP 400), nothing
changed. The audit is the service's (each writes its history and the operators' activity log).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from portal.errors import DomainError
from portal.operator_log import ActionImpact

CONFIRM_TEMPLATE = "portal/confirm.html"


@dataclass(frozen=True)
class Confirmation:
    """What the confirmation page says: its title, what will happen (computed only when the page is
    shown), the button and where Cancel goes."""

    title: str
    impact: Callable[[], ActionImpact]
    button: str
    cancel_url: str
    danger: bool = True


def confirm_then_act(
    request: HttpRequest,
    form: forms.Form,
    confirmation: Confirmation,
    act: Callable[[Mapping[str, Any]], str],
    *,
    done_url: str,
    refused_url: str | None = None,
) -> HttpResponse:
    """GET: the confirmation. POST: when `form` (bound to request.POST by the caller) is valid,
    `act(form.cleaned_data)` returns the success message and the person goes to `done_url`; a
    DomainError from it goes to `refused_url` as an error message (raised on when there is none).
    An invalid form renders the confirmation with its errors, HTTP 400."""
    if request.method == "POST" and form.is_valid():
        try:
            message = act(form.cleaned_data)
        except DomainError as error:
            if refused_url is None:
                raise
            messages.error(request, error.message)
            return redirect(refused_url)
        messages.success(request, message)
        return redirect(done_url)
    context = {
        "title": confirmation.title,
        "impact": confirmation.impact(),
        "form": form,
        "button": confirmation.button,
        "danger": confirmation.danger,
        "cancel_url": confirmation.cancel_url,
    }
    return render(request, CONFIRM_TEMPLATE, context, status=400 if form.is_bound else 200)
