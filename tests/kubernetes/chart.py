"""The Helm chart with real Helm (built by scripts/kube-stack.sh) and its objects on the API server."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.kubernetes.stack import ROOT, KubeStack

CHART = ROOT / "deploy" / "helm" / "tessera"
PRODUCTION_VALUES = CHART / "values-production.yaml"


def helm(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the cached helm binary (no repositories, no cluster access: HOME-independent dirs)."""
    return subprocess.run(
        [str(bin_dir / "helm"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "HELM_CACHE_HOME": str(bin_dir / "helm-home" / "cache"),
            "HELM_CONFIG_HOME": str(bin_dir / "helm-home" / "config"),
            "HELM_DATA_HOME": str(bin_dir / "helm-home" / "data"),
        },
    )


def render(
    bin_dir: Path,
    *,
    release: str = "tessera",
    namespace: str = "tessera",
    values: Sequence[Path] = (),
    sets: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """`helm template` of the chart: the rendered objects."""
    args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", "1.34.4"]
    for path in values:
        args += ["--values", str(path)]
    for assignment in sets:
        args += ["--set", assignment]
    done = helm(bin_dir, *args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


class Discovery:
    """kind -> (plural, namespaced) for each group version the API server serves."""

    def __init__(self, stack: KubeStack) -> None:
        self.stack = stack
        self.cache: dict[str, dict[str, tuple[str, bool]]] = {}

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        if api_version not in self.cache:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            status, body = self.stack.request("GET", base)
            assert status == 200, f"{api_version} is not served: {body}"
            self.cache[api_version] = {
                r["kind"]: (r["name"], bool(r["namespaced"]))
                for r in body["resources"]
                if "/" not in r["name"]
            }
        kinds = self.cache[api_version]
        assert kind in kinds, f"{api_version} serves no kind {kind}"
        return kinds[kind]

    def path(self, obj: dict[str, Any], default_namespace: str) -> str:
        api_version, kind = obj["apiVersion"], obj["kind"]
        plural, namespaced = self.resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        name = obj["metadata"]["name"]
        if namespaced:
            namespace = obj["metadata"].get("namespace") or default_namespace
            return f"{base}/namespaces/{namespace}/{plural}/{name}"
        return f"{base}/{plural}/{name}"
