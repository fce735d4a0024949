"""The engine imports only numpy and the standard library, and works without Django settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_engine_imports_without_django_and_loads_nothing_forbidden() -> None:
    code = (
        "import sys, scheduling.engine as e;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'django','rest_framework','celery','kubernetes','plotly','portal','quotas','codespaces'});"
        "print(','.join(bad))"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_engine_source_reads_no_clock_env_or_global_random() -> None:
    forbidden = ("import time", "import random", "os.environ", "datetime.now", "uuid4", "open(")
    for path in (REPO / "scheduling" / "engine").rglob("*.py"):
        text = path.read_text()
        for word in forbidden:
            assert word not in text, f"{path.name} uses {word!r}"
