"""Operators' template pages: who sees them, create and edit with presets and teams, every refusal
on the form with nothing saved, a concurrent edit refused, retiring, and what developers then see."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from codespaces import services
from codespaces.models import CodespaceTemplate
from codespaces.tests.factories import (
    CodespaceFactory,
    CodespaceTemplateFactory,
    TemplatePresetFactory,
)

pytestmark = pytest.mark.django_db


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "pytorch",
        "display_name": "PyTorch",
        "image": "ghcr.io/acme/pytorch:2.5",
        "description": "CUDA 12, PyTorch, Jupyter",
        "home_volume_gib": 40,
        "allow_custom": "on",
        "allow_slices": "on",
        "whole_card_models": "T4, L4",
        "min_cpu_cores": "0.5",
        "max_cpu_cores": "8",
        "min_memory_gib": 1,
        "max_memory_gib": 64,
        "max_gpu_count": 2,
        "idle_window_minutes": 45,
        "idle_grace_minutes": 10,
        "idle_threshold_percent": 5,
        "max_per_user": 2,
        "active": "on",
        "presets-TOTAL_FORMS": 0,
        "presets-INITIAL_FORMS": 0,
        "presets-MIN_NUM_FORMS": 0,
        "presets-MAX_NUM_FORMS": 30,
    }
    data.update(overrides)
    return data


def _presets(*rows: dict[str, Any], initial: int = 0, blank: int = 0) -> dict[str, Any]:
    data: dict[str, Any] = {
        "presets-TOTAL_FORMS": len(rows) + blank,
        "presets-INITIAL_FORMS": initial,
    }
    for index, row in enumerate(rows):
        data.update({f"presets-{index}-{name}": value for name, value in row.items()})
    for index in range(
        len(rows), len(rows) + blank
    ):  # untouched blank rows, as the browser sends them
        data.update({f"presets-{index}-gpu_mode": "slice", f"presets-{index}-cpu_cores": "2"})
        data[f"presets-{index}-memory_gib"] = "8"
    return data


QUARTER = {
    "name": "quarter-h100", "label": "1/4 H100", "gpu_mode": "slice", "gpu_percent": 25,
    "gpu_memory_gib": 20, "gpu_count": "", "gpu_model": "H100", "cpu_cores": "4", "memory_gib": 32,
}  # fmt: skip
WHOLE = {
    "name": "one-a100", "label": "1 × A100", "gpu_mode": "whole", "gpu_percent": "",
    "gpu_memory_gib": "", "gpu_count": 1, "gpu_model": "", "cpu_cores": "8", "memory_gib": 64,
}  # fmt: skip


@pytest.mark.parametrize("persona", ["alice", "bob", "charlie"])
def test_only_operators_see_the_template_pages(request: Any, persona: str) -> None:
    template = CodespaceTemplateFactory()
    client = client_for(request.getfixturevalue(persona))
    for url in (
        "/codespaces/templates/",
        "/codespaces/templates/new/",
        f"/codespaces/templates/{template.pk}/edit/",
    ):
        assert client.get(url).status_code == 404
    assert client.post("/codespaces/templates/new/", _form()).status_code == 404
    assert not CodespaceTemplate.objects.filter(name="pytorch").exists()


def test_the_list_shows_sizes_teams_and_live_codespaces_per_template(
    operator: Any, team_a: Any, bob: Any, quota_a: Any
) -> None:
    template = CodespaceTemplateFactory(name="jupyter", display_name="Jupyter")
    TemplatePresetFactory(template=template, name="small", label="1/8 A100")
    template.allowed_tenants.set([team_a])
    CodespaceFactory(template=template, owner=bob, tenant=team_a, quota=quota_a)
    CodespaceFactory(template=template, owner=bob, tenant=team_a, quota=quota_a, state="deleted")
    page = client_for(operator).get("/codespaces/templates/").content.decode()
    for shown in ("Jupyter", "1/8 A100", "team-a"):
        assert shown in page
    assert 'data-testid="live-jupyter">1<' in page  # the deleted one does not count


def test_an_operator_creates_a_template_with_presets_and_teams(
    operator: Any, team_a: Any, team_b: Any
) -> None:
    data = _form(allowed_tenants=["team-b"]) | _presets(QUARTER, WHOLE, blank=2)
    response = client_for(operator).post("/codespaces/templates/new/", data)
    assert response.status_code == 302
    assert response["Location"] == "/codespaces/templates/"
    template = CodespaceTemplate.objects.get(name="pytorch")
    assert (template.min_cpu_milli, template.max_cpu_milli) == (500, 8000)
    assert (template.min_memory_mib, template.max_memory_mib) == (1024, 64 * 1024)
    assert template.whole_card_models == ["T4", "L4"]
    assert (template.idle_window_minutes, template.idle_grace_minutes) == (45, 10)
    presets = list(template.presets.order_by("position"))
    assert [(p.name, p.gpu_percent, p.gpu_memory_gib, p.cpu_milli) for p in presets] == [
        ("quarter-h100", 25, 20, 4000),
        ("one-a100", 0, 0, 8000),
    ]
    assert presets[1].gpu_count == 1  # the blank rows added nothing
    assert [t.slug for t in template.allowed_tenants.all()] == ["team-b"]


@pytest.mark.parametrize(
    ("overrides", "rows", "field", "message"),
    [
        ({"max_cpu_cores": "0.2"}, (), "min_cpu_cores", "CPU minimum is above the maximum"),
        ({"min_memory_gib": 65}, (), "min_memory_gib", "memory minimum is above the maximum"),
        ({"name": "Not A Slug"}, (), "name", "Enter a valid"),
        ({"idle_threshold_percent": 101}, (), "idle_threshold_percent", "less than or equal"),
        # issue 9: this window made the idle task raise OverflowError every minute
        ({"idle_window_minutes": 9_999_999_999}, (), "idle_window_minutes", "less than or equal"),
        ({"idle_grace_minutes": 43_201}, (), "idle_grace_minutes", "less than or equal to 43200"),
        ({}, ({**QUARTER, "gpu_percent": 0},), None, "compute must be 1-100%"),
        ({}, (QUARTER, {**WHOLE, "name": "quarter-h100"}), None, "is used twice"),
        ({}, ({**WHOLE, "gpu_count": 0},), None, "count of at least 1"),
        ({}, ({**WHOLE, "memory_gib": 10**7},), "preset", "less than or equal to 65536"),
    ],
)
def test_a_refused_template_shows_why_on_the_form_and_saves_nothing(
    operator: Any,
    overrides: dict[str, Any],
    rows: tuple[dict[str, Any], ...],
    field: Any,
    message: str,
) -> None:
    data = _form(**overrides) | _presets(*rows)
    response = client_for(operator).post("/codespaces/templates/new/", data)
    assert response.status_code == 200
    form, presets = response.context["form"], response.context["presets"]
    if field == "preset":  # on the preset row's own field
        errors = [e for row in presets.errors for messages in row.values() for e in messages]
    else:
        errors = form.errors.get(field if field else "__all__", [])
    assert any(message in str(error) for error in errors), (form.errors, presets.errors)
    assert message in response.content.decode().replace("&#x27;", "'")
    assert not CodespaceTemplate.objects.filter(name__in=["pytorch", "Not A Slug"]).exists()


def test_an_edit_replaces_the_presets_and_retiring_hides_the_template_from_developers(
    operator: Any, bob: Any, team_a: Any
) -> None:
    template = CodespaceTemplateFactory(name="jupyter", allow_custom=True)
    TemplatePresetFactory(template=template, name="small", label="Small", position=0)
    TemplatePresetFactory(template=template, name="large", label="Large", position=1)
    assert services.templates_for_user(bob).filter(pk=template.pk).exists()
    client = client_for(operator)
    page = client.get(f"/codespaces/templates/{template.pk}/edit/")
    assert page.context["form"].initial["max_per_user"] == template.max_per_user
    small, large = (
        {**QUARTER, "name": "small", "label": "Small"},
        {**QUARTER, "name": "large", "label": "Large", "gpu_percent": 50, "DELETE": "on"},
    )
    data = _form(name="jupyter", version=template.version, active="") | _presets(
        small, large, WHOLE, initial=2
    )
    del data["active"]  # an unticked checkbox is not sent
    response = client.post(f"/codespaces/templates/{template.pk}/edit/", data)
    assert response.status_code == 302, response.context["form"].errors
    template.refresh_from_db()
    assert [p.name for p in template.presets.order_by("position")] == ["small", "one-a100"]
    assert template.active is False
    assert template.version == 2
    assert not services.templates_for_user(bob).filter(pk=template.pk).exists()
    assert "retired" in client.get("/codespaces/templates/").content.decode()


def test_an_edit_of_a_template_someone_saved_meanwhile_is_refused(operator: Any) -> None:
    template = CodespaceTemplateFactory(name="jupyter", max_per_user=2)
    stale = template.version
    services.update_template(template, expected_version=stale, max_per_user=5)
    data = _form(name="jupyter", version=stale, max_per_user=9)
    response = client_for(operator).post(f"/codespaces/templates/{template.pk}/edit/", data)
    assert response.status_code == 200
    assert "Someone else saved this template first" in response.content.decode()
    template.refresh_from_db()
    assert template.max_per_user == 5
