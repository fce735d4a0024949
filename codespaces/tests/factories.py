"""factory_boy factories for codespace templates, presets and codespaces (rows only, no services)."""

from __future__ import annotations

from typing import Any

import factory

from codespaces.choices import CodespaceState, GpuMode
from codespaces.models import Codespace, CodespaceTemplate, TemplatePreset
from codespaces.phase import desired_for
from quotas.tests.factories import make_workload


class CodespaceTemplateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CodespaceTemplate
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"template-{n}")
    display_name = factory.LazyAttribute(lambda t: t.name.title())
    image = "ghcr.io/tessera/codespace-pytorch:test"
    home_volume_gib = 50
    whole_card_models = factory.LazyFunction(lambda: ["T4"])
    idle_window_minutes = 60
    idle_grace_minutes = 15
    idle_threshold_percent = 5
    max_per_user = 2


class TemplatePresetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TemplatePreset

    template = factory.SubFactory(CodespaceTemplateFactory)
    name = factory.Sequence(lambda n: f"preset-{n}")
    label = factory.LazyAttribute(lambda p: p.name)
    gpu_mode = GpuMode.SLICE
    gpu_count = 1
    gpu_percent = 25
    gpu_memory_gib = 20
    cpu_milli = 2000
    memory_mib = 8192


class CodespaceFactory(factory.django.DjangoModelFactory):
    """A codespace row in any state, for lifecycle and access tests (no workload is submitted). Its
    desired state is the one its state implies; what it shows (`phase`) is derived from that and its
    workload, so a placed, starting, running or failed one needs a `workload` in the matching state
    (`workload_in`)."""

    class Meta:
        model = Codespace

    name = factory.Sequence(lambda n: f"cs-{n}")
    template = factory.SubFactory(CodespaceTemplateFactory)
    image = factory.LazyAttribute(lambda c: c.template.image)
    gpu_mode = GpuMode.SLICE
    gpu_count = 1
    gpu_milli = 250
    gpu_memory_mib = 20480
    cpu_milli = 2000
    memory_mib = 8192
    home_gib = 50
    state = CodespaceState.QUEUED
    desired_state = factory.LazyAttribute(lambda c: desired_for(c.state))


def workload_in(quota: Any, state: str) -> Any:
    """A codespace workload row of `quota` in scheduling `state` (no placement), for a factory
    codespace whose phase must be that of a workload in this state."""
    return make_workload(quota, state=state, kind="codespace")
