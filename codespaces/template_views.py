"""Operators' pages for codespace templates: what developers may create, in which sizes, for which
teams, under which idle policy. Thin: parse the form and preset rows, call one service, render.

- /codespaces/templates/              every template: presets, teams, codespaces made from it
- /codespaces/templates/new/          create, with preset rows
- /codespaces/templates/<id>/edit/    edit (a concurrent save is refused, not overwritten); untick
                                      "offered" to retire it (its codespaces keep working)
- /codespaces/templates/<id>/delete/  the one confirmation of a delete (= retire), then audited
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from codespaces import services
from codespaces.delete_preview import template_retire_impact
from codespaces.forms import (
    TEMPLATE_FIELD_TO_FORM,
    PresetForm,
    PresetFormSet,
    TemplateForm,
    preset_values,
)
from codespaces.models import CodespaceTemplate
from portal.confirmation import Confirmation, confirm_then_act
from portal.errors import DomainError, PreconditionFailed
from portal.forms import show_domain_error, stale_edit_message
from portal.models import Tenant
from portal.scoping import require_operator
from scheduling.forms import ReasonForm


@login_required
def template_list(request: HttpRequest) -> HttpResponse:
    require_operator(request.user)
    return render(
        request,
        "codespaces/template_list.html",
        {"templates": list(services.templates_overview()), "scope": "templates"},
    )


@login_required
def template_form(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    """Create or edit a template with its presets; every refusal shows on the form, nothing saved."""
    require_operator(request.user)
    template = get_object_or_404(CodespaceTemplate, pk=pk) if pk is not None else None
    data = request.POST if request.method == "POST" else None
    slugs = list(Tenant.objects.order_by("slug").values_list("slug", flat=True))
    form = TemplateForm(data, template=template, tenant_slugs=slugs)
    presets = PresetFormSet(
        data,
        prefix="presets",
        initial=[PresetForm.initial_for(p) for p in template.presets.all()] if template else None,
    )
    if data is not None and form.is_valid() and presets.is_valid():
        fields = form.values()
        chosen = form.cleaned_data["allowed_tenants"]
        try:
            if template is None:
                saved = services.create_template(
                    presets=preset_values(presets), allowed_tenant_slugs=chosen, **fields
                )
            else:
                saved = services.update_template(
                    template,
                    expected_version=form.cleaned_data.get("version") or template.version,
                    presets=preset_values(presets),
                    allowed_tenant_slugs=chosen,
                    **fields,
                )
        except PreconditionFailed:
            assert template is not None
            form.add_error(None, stale_edit_message("template", template))
        except DomainError as error:
            show_domain_error(form, error, TEMPLATE_FIELD_TO_FORM)
        else:
            state = "offered to developers" if saved.active else "retired"
            messages.success(
                request, f"Template {saved.name} saved (version {saved.version}, {state})."
            )
            return redirect("codespaces:templates")
    return render(
        request,
        "codespaces/template_form.html",
        {"form": form, "presets": presets, "template": template, "scope": "templates"},
    )


@login_required
@require_http_methods(["GET", "POST"])
def template_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the one confirmation (what retiring does, counted). POST: retire, audited, redirect; a
    bad reason shows on the confirmation (400), nothing changed."""
    require_operator(request.user)
    template = get_object_or_404(CodespaceTemplate, pk=pk)
    form = ReasonForm(request.POST if request.method == "POST" else None)

    def retire(cleaned: Mapping[str, Any]) -> str:
        services.retire_template(template, actor=request.user, reason=cleaned["reason"])
        return (
            f"Template {template.name} deleted (retired): it is no longer offered; its codespaces "
            "keep working."
        )

    return confirm_then_act(
        request,
        form,
        Confirmation(
            title=f"Delete template {template.name}?",
            impact=lambda: template_retire_impact(template),
            button="Delete template",
            cancel_url=reverse("codespaces:templates"),
        ),
        retire,
        done_url=reverse("codespaces:templates"),
    )
