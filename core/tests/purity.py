"""What a module loads when imported in a fresh interpreter without Django settings: the check that the
decision core (units, the placement engine, the replay) stays Django-free at run time, not only by the
import contract."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FRAMEWORKS = frozenset({"django", "rest_framework", "celery", "kubernetes", "plotly"})


def loaded_modules_under(imports: str, packages: Iterable[str]) -> list[str]:
    """The modules of ``packages`` (top-level names) that ``import <imports>`` loads in a fresh interpreter
    run from the repository root without ``DJANGO_SETTINGS_MODULE``; raises if the import fails."""
    code = (
        f"import sys, {imports};"
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(packages)!r})))"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    return [name for name in out.stdout.strip().split(",") if name]
