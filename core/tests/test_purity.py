"""``core`` imports without Django settings and loads no framework and no app."""

from __future__ import annotations

from core.tests.purity import FRAMEWORKS, loaded_modules_under

APPS = ("portal", "quotas", "codespaces", "scheduling", "dashboards")


def test_core_imports_without_django_settings_and_loads_no_framework_or_app() -> None:
    assert loaded_modules_under("core, core.units", FRAMEWORKS | set(APPS)) == []
