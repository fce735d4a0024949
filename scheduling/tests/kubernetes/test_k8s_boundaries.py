"""Module boundaries of the backend (one gateway, Django only in backend.py) and format properties."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from scheduling.backends.kubernetes.hami import HamiDevice, parse_node_register

PACKAGE = Path(__file__).resolve().parents[2] / "backends" / "kubernetes"
REPO = PACKAGE.parents[2]


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_only_the_gateway_imports_kubernetes_and_only_backend_imports_django():
    importers = {
        root: sorted(p.name for p in PACKAGE.glob("*.py") if root in imported_roots(p))
        for root in ("kubernetes", "urllib3", "django")
    }

    assert importers == {
        "kubernetes": ["gateway.py"],
        "urllib3": ["gateway.py"],
        "django": ["backend.py"],
    }


def test_package_imports_without_django_settings_or_kubernetes_client():
    code = (
        "import sys, scheduling.backends.kubernetes as k\n"
        "import scheduling.backends.kubernetes.fake, scheduling.backends.kubernetes.status\n"
        "print(sorted(m for m in ('kubernetes', 'django.conf') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert result.stdout.strip() == "[]"


_devices = st.lists(
    st.builds(
        HamiDevice,
        uuid=st.from_regex(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}", fullmatch=True),
        index=st.integers(0, 15),
        count=st.integers(1, 100),
        memory_mib=st.integers(1, 200_000),
        cores=st.integers(1, 100),
        model=st.from_regex(r"NVIDIA-[A-Za-z0-9 -]{1,20}", fullmatch=True),
        numa=st.integers(0, 7),
        mode=st.sampled_from(["hami-core", "mig", "mps"]),
        healthy=st.booleans(),
    ),
    max_size=8,
)


@given(_devices)
def test_register_json_and_colon_formats_carry_the_same_devices(devices):
    as_json = json.dumps(
        [
            {
                "id": d.uuid,
                "index": d.index,
                "count": d.count,
                "devmem": d.memory_mib,
                "devcore": d.cores,
                "type": d.model,
                "numa": d.numa,
                "mode": d.mode,
                "health": d.healthy,
            }
            for d in devices
        ]
    )
    as_colon = "".join(
        f"{d.uuid},{d.count},{d.memory_mib},{d.cores},{d.model},{d.numa},"
        f"{str(d.healthy).lower()},{d.index},{d.mode}:"
        for d in devices
    )

    assert parse_node_register(as_json) == devices
    assert parse_node_register(as_colon) == devices
