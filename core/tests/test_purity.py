"""``core`` (the units, the placement engine and the replay) imports without Django settings, loads no
framework and no app, and its source reads no clock, environment or global random state."""

from __future__ import annotations

from core.tests.purity import FRAMEWORKS, REPO, loaded_modules_under

APPS = ("portal", "quotas", "codespaces", "scheduling", "dashboards")


def test_core_imports_without_django_settings_and_loads_no_framework_or_app() -> None:
    assert (
        loaded_modules_under(
            "core, core.units, core.placement, core.simulation", FRAMEWORKS | set(APPS)
        )
        == []
    )


def test_core_source_reads_no_clock_env_or_global_random() -> None:
    forbidden = ("import time", "import random", "os.environ", "datetime.now", "uuid4", "open(")
    sources = [path for path in (REPO / "core").rglob("*.py") if "tests" not in path.parts]
    assert any(path.match("core/placement/planner.py") for path in sources)
    assert any(path.match("core/simulation/replay.py") for path in sources)
    for path in sources:
        text = path.read_text()
        for word in forbidden:
            assert word not in text, f"{path.relative_to(REPO)} uses {word!r}"
