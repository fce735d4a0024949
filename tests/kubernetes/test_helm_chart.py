"""The Helm chart with real Helm: lint, template, schema validation for Kubernetes 1.34 and a
server-side apply dry-run of every rendered object on the test control plane, with the default
values and with the production example (values-production.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.kubernetes.chart import CHART, PRODUCTION_VALUES, Discovery, helm, render
from tests.kubernetes.cluster import apply
from tests.kubernetes.conftest import create_namespace
from tests.kubernetes.stack import ROOT, KubeStack

pytestmark = pytest.mark.kubernetes

VALUES = {"default": (), "production": (PRODUCTION_VALUES,)}


@pytest.mark.parametrize("values", VALUES.keys())
def test_helm_lint_is_clean(kube_bin: Path, values: str) -> None:
    args = ["lint", "--strict", str(CHART)]
    for path in VALUES[values]:
        args += ["--values", str(path)]
    done = helm(kube_bin, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("values", VALUES.keys())
def test_rendered_chart_is_valid_for_kubernetes_1_34(kube_bin: Path, values: str) -> None:
    objects = render(kube_bin, values=VALUES[values])
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, "1.34", strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
    assert errors == []
    assert {o["kind"] for o in objects} >= {"Deployment", "Service", "ServiceAccount", "Role"}


@pytest.mark.parametrize("values", VALUES.keys())
def test_rendered_chart_applies_to_the_control_plane(
    kube_stack: KubeStack, kube_bin: Path, values: str
) -> None:
    objects = render(kube_bin, values=VALUES[values])
    discovery = Discovery(kube_stack)
    # the release namespace (created by the operator, not the chart) and the chart's namespaces
    # exist for real; every other object goes through a server-side apply dry run
    create_namespace(kube_stack, "tessera")
    refused: dict[str, Any] = {}
    for obj in sorted(objects, key=lambda o: o["kind"] != "Namespace"):
        is_namespace = obj["kind"] == "Namespace"
        path = discovery.path(obj, "tessera")
        status, body = apply(kube_stack, path, yaml.safe_dump(obj), dry_run=not is_namespace)
        if status not in (200, 201):
            refused[f"{obj['kind']}/{obj['metadata']['name']}"] = body.get("message", body)
    assert refused == {}


def test_production_values_take_secrets_ingress_and_sizes(kube_bin: Path) -> None:
    objects = {
        (o["kind"], o["metadata"]["name"]): o for o in render(kube_bin, values=[PRODUCTION_VALUES])
    }
    web = objects[("Deployment", "tessera-web")]["spec"]
    env = {e["name"]: e for e in web["template"]["spec"]["containers"][0]["env"]}
    assert env["CELERY_BROKER_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "tessera-redis",
        "key": "broker-url",
    }
    assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "tessera-redis",
        "key": "redis-url",
    }
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "tessera-secrets",
        "key": "database-url",
    }
    assert web["replicas"] == 3
    ingress = objects[("Ingress", "tessera-web")]["spec"]
    assert ingress["tls"] == [{"hosts": ["tessera.internal.example"], "secretName": "tessera-tls"}]
    assert ingress["rules"][0]["http"]["paths"][0]["backend"]["service"] == {
        "name": "tessera-web",
        "port": {"name": "http"},
    }
    defaults = {o["kind"] for o in render(kube_bin)}
    assert "Ingress" not in defaults


def test_plain_manifests_are_the_chart_rendered_with_default_values(kube_bin: Path) -> None:
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in render(kube_bin)}
    plain = {
        (d["kind"], d["metadata"]["name"]): d
        for path in sorted((ROOT / "deploy" / "manifests").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d
    }
    # the plain set also creates the release namespace, which Helm leaves to `helm install -n`
    release_namespace = plain.pop(("Namespace", "tessera"))
    assert release_namespace["metadata"]["labels"]["app.kubernetes.io/instance"] == "tessera"
    assert plain == rendered
