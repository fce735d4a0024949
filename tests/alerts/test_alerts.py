"""The Prometheus alerting rules shipped with the Helm chart: `promtool check rules` is clean and
`promtool test rules` (alerts_test.yaml: an XID 79, a flapping temperature, a long wait, a quota at its
maximum with work waiting, drift) fires exactly the expected alerts. Needs promtool (Debian package
`prometheus`, which .ci/run installs for the Prometheus integration test)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RULES = HERE.parents[1] / "deploy" / "helm" / "tessera" / "files" / "alerts.yaml"


@pytest.fixture
def promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("needs promtool (Debian package `prometheus`)")
    return binary


def test_the_shipped_rules_are_valid(promtool: str) -> None:
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 9 rules found" in done.stdout


def test_the_rules_fire_on_the_fixed_series(promtool: str) -> None:
    done = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yaml"], capture_output=True, text=True, cwd=HERE
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
