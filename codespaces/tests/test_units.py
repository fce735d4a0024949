"""The one set of size rules and input bounds of a codespace (codespaces.services.sizing), shared by the
pages, the API and the services (issue 24); the unit conversion itself is core.units (core/tests)."""

from __future__ import annotations

import ast
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from codespaces.api.serializers import SizeSerializer
from codespaces.forms import CodespaceCreateForm, SizePreviewForm
from codespaces.services.sizing import SIZE_INPUT_BOUNDS, SizeRequest, size_rule_violations
from core import units

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("_case", "mode", "percent", "memory_gib", "count", "broken"),
    [
        ("a good slice", "slice", 25, 20, 1, set()),
        ("a slice of 0 %", "slice", 0, 20, 1, {"gpu_percent"}),
        ("a slice of 101 %", "slice", 101, 20, 1, {"gpu_percent"}),
        ("a slice without GPU memory", "slice", 100, 0, 1, {"gpu_memory_gib"}),
        ("both wrong", "slice", -1, -1, 1, {"gpu_percent", "gpu_memory_gib"}),
        ("one whole card", "whole", 0, 0, 1, set()),
        ("no whole card", "whole", 0, 0, 0, {"gpu_count"}),
        ("CPU only ignores the GPU numbers", "none", -5, -5, -5, set()),
    ],
)
def test_size_rules_name_the_fields_they_break(
    _case: str, mode: str, percent: int, memory_gib: int, count: int, broken: set[str]
) -> None:
    assert size_rule_violations(
        mode, gpu_percent=percent, gpu_memory_gib=memory_gib, gpu_count=count
    ) == frozenset(broken)


def test_the_pages_size_is_the_services_size_in_service_units() -> None:
    # given what the create form and the picker's preview form clean a custom size to
    data = {
        "gpu_mode": "slice",
        "gpu_percent": 25,
        "gpu_memory_gib": 20,
        "gpu_count": None,
        "gpu_model": "",
        "cpu_cores": Decimal("4.5"),
        "memory_gib": 16,
    }
    # then both build the same request, in milli-CPU and MiB
    assert SizeRequest.from_page(data) == SizeRequest(
        gpu_mode="slice",
        gpu_count=0,
        gpu_percent=25,
        gpu_memory_gib=20,
        gpu_model="",
        cpu_milli=4500,
        memory_mib=16384,
    )


def _create_form(data: dict[str, Any]) -> CodespaceCreateForm:
    return CodespaceCreateForm(data, templates=[], quotas=[], selected_template=None, gpu_models=[])


@pytest.mark.parametrize("name", ["gpu_count", "gpu_percent", "gpu_memory_gib"])
def test_pages_and_api_refuse_the_same_out_of_bounds_size(name: str) -> None:
    # given one past the bound of a typed size field
    low, high = SIZE_INPUT_BOUNDS[name]
    # then the create form, the preview form and the API serializer all refuse it on that field
    # (the create form took any number here before: issue 24, one validation of a size)
    for value in (low - 1, high + 1):
        assert name in _create_form({name: value}).errors
        assert name in SizePreviewForm({"template": "t", name: value}).errors
        api = SizeSerializer(data={name: value})
        assert not api.is_valid()
        assert name in api.errors
    # and all accept the bound itself
    assert name not in _create_form({name: high}).errors
    assert name not in SizePreviewForm({"template": "t", name: high}).errors
    assert SizeSerializer(data={name: high}).is_valid(), name


def test_memory_and_cpu_bounds_agree_between_pages_and_api() -> None:
    # the pages speak GiB and cores, the API MiB and milli-CPU: the same bound in both units
    cpu_high = SIZE_INPUT_BOUNDS["cpu_milli"][1]
    memory_high = SIZE_INPUT_BOUNDS["memory_mib"][1]
    assert SizePreviewForm.base_fields["cpu_cores"].max_value == units.milli_to_cores(cpu_high)  # type: ignore[attr-defined]
    assert SizePreviewForm.base_fields["memory_gib"].max_value == units.mib_to_gib(memory_high)  # type: ignore[attr-defined]
    assert CodespaceCreateForm.base_fields["memory_gib"].max_value == units.mib_to_gib(memory_high)  # type: ignore[attr-defined]
    assert not SizeSerializer(data={"memory_mib": memory_high + 1}).is_valid()
    assert not SizeSerializer(data={"cpu_milli": cpu_high + 1}).is_valid()


CALLERS = [
    "codespaces/views.py",
    "codespaces/template_views.py",
    "codespaces/api/views.py",
    "codespaces/admin.py",
    "codespaces/idle.py",
    "codespaces/tasks.py",
    "portal/cli.py",
]


@pytest.mark.parametrize("path", CALLERS)
def test_callers_use_only_public_service_functions(path: str) -> None:
    # views, the API, the CLI and tasks call `codespaces.services`' public names, never a private one
    tree = ast.parse((REPO / path).read_text())
    private = [
        f"{node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "services"
        and node.attr.startswith("_")
    ]
    imported = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("codespaces.services")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert private + imported == []
