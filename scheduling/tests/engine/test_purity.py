"""The engine imports only numpy and the standard library, and works without Django settings."""

from __future__ import annotations

from pathlib import Path

from core.tests.purity import FRAMEWORKS, loaded_modules_under

REPO = Path(__file__).resolve().parents[3]


def test_engine_imports_without_django_and_loads_nothing_forbidden() -> None:
    assert (
        loaded_modules_under("scheduling.engine", FRAMEWORKS | {"portal", "quotas", "codespaces"})
        == []
    )


def test_engine_source_reads_no_clock_env_or_global_random() -> None:
    forbidden = ("import time", "import random", "os.environ", "datetime.now", "uuid4", "open(")
    for path in (REPO / "scheduling" / "engine").rglob("*.py"):
        text = path.read_text()
        for word in forbidden:
            assert word not in text, f"{path.name} uses {word!r}"
