"""Every manifest Tessera generates, and the deploy manifests, validate against the Kubernetes
OpenAPI schemas of 1.29 to 1.33 (kubernetes-validate, offline, strict: no unknown fields).

Helm is not installable from Debian, PyPI or npm here, so the chart itself cannot be rendered in
tests; deploy/manifests/ is its rendered equivalent, validated here, and the chart is checked
statically (every `.Values` path it uses exists in values.yaml; the same objects as the plain
manifests)."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml
from k8s_builders import NOW, codespace, config, gang_pod

from scheduling.backends.kubernetes.constants import DEVICE_PLUGIN_MODES
from scheduling.backends.kubernetes.manifests import build_objects

VERSIONS = ["1.29", "1.30", "1.31", "1.32", "1.33"]
REPO = Path(__file__).resolve().parents[3]
PLAIN = REPO / "deploy" / "manifests"
CHART = REPO / "deploy" / "helm" / "tessera"


def generated_objects() -> list[tuple[str, dict]]:
    """Codespace (pod + PVC + Service) and gang pod, CPU-only pod, in the three device-plugin modes
    (dra mode's objects, on resource.k8s.io/v1 of 1.34+, are validated in test_k8s_dra_backend.py)."""
    objects = []
    for mode in DEVICE_PLUGIN_MODES:
        for label, request in [
            ("codespace", codespace()),
            ("gang-pod", gang_pod(0)),
            ("cpu-only", codespace(gpus=(), home_volume_gib=0)),
        ]:
            built = build_objects(request, config(mode, storage_class="fast"), now=NOW)
            for obj in (built.pod, built.home_pvc, built.service):
                if obj is not None:
                    objects.append((f"{mode.value}/{label}/{obj['kind']}", obj))
    return objects


def plain_documents() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(PLAIN.rglob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                docs.append((f"{path.relative_to(PLAIN)}#{index}", doc))
    return docs


def test_schema_versions_are_shipped_offline():
    shipped = set(kubernetes_validate.utils.all_versions())

    assert {f"{v}.0" for v in VERSIONS} <= shipped


@pytest.mark.parametrize("version", VERSIONS)
def test_generated_manifests_validate(version):
    objects = generated_objects()

    for label, obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{label} is invalid for {version}: {exc.message} at {list(exc.path)}")
    assert (
        len(objects) == 18
    )  # 3 modes × (codespace: pod+PVC+Service, gang pod, cpu-only pod+Service)


@pytest.mark.parametrize("version", VERSIONS)
def test_plain_deploy_manifests_validate(version):
    docs = plain_documents()

    for label, doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{label} is invalid for {version}: {exc.message} at {list(exc.path)}")
    assert len(docs) == 22  # 17 + the alerting rules' ConfigMap + optional/rbac-dra.yaml's 4


@pytest.mark.parametrize(
    ("_case", "field", "value"),
    [("wrong-type", "restartPolicy", ["Always"]), ("typo", "schedulerNmae", "hami-scheduler")],
)
def test_validator_rejects_a_broken_manifest(_case, field, value):
    pod = build_objects(codespace(), config(), now=NOW).pod
    pod["spec"][field] = value

    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, "1.33", strict=True)


def _values_paths(tree: object, prefix: str = "") -> set[str]:
    paths = {prefix} if prefix else set()
    if isinstance(tree, dict):
        for key, value in tree.items():
            paths |= _values_paths(value, f"{prefix}.{key}" if prefix else key)
    return paths


def test_chart_uses_only_values_that_exist():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    known = _values_paths(values)
    used = set()
    for template in (CHART / "templates").iterdir():
        used |= set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", template.read_text()))

    assert used, "the templates use no values"
    assert sorted(used - known) == []


def test_chart_metadata_and_templates_match_plain_manifests():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    template_kinds = set()
    for template in (CHART / "templates").glob("*.yaml"):
        template_kinds |= set(re.findall(r"^kind: (\w+)$", template.read_text(), re.MULTILINE))
    plain_kinds = {doc["kind"] for _, doc in plain_documents()}

    assert (chart["apiVersion"], chart["name"]) == ("v2", "tessera")
    # off by default (ingress.enabled, alerts.prometheusRule.enabled), so not in the plain set
    assert {"Ingress", "PrometheusRule"} <= template_kinds
    assert (
        template_kinds - {"Ingress", "PrometheusRule"}
        == plain_kinds
        == {
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
            "ConfigMap",
        }
    )


def test_plain_rbac_is_least_privilege():
    rules = {
        (doc["kind"], doc["metadata"]["name"]): doc["rules"]
        for _, doc in plain_documents()
        if doc["kind"] in ("Role", "ClusterRole")
    }

    assert rules[("ClusterRole", "tessera-inventory")] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    assert rules[("ClusterRole", "tessera-hami-node-lock")] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}
    ]
    assert rules[("Role", "tessera-binding")] == [
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}
    ]
    assert rules[("ClusterRole", "tessera-dra-slices")] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["get", "list"],
        }
    ]
    assert rules[("Role", "tessera-dra-claims")] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims"],
            "verbs": ["get", "list", "create", "delete"],
        }
    ]
    all_verbs = {
        verb for rule_list in rules.values() for rule in rule_list for verb in rule["verbs"]
    }
    assert "*" not in all_verbs
    assert not {"update", "deletecollection", "escalate", "bind"} & all_verbs


def test_plain_manifests_pass_the_same_environment_as_the_chart():
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    env_block = helpers.split('define "tessera.env"')[1].split("{{- end -}}")[0]
    # each name once: the broker URLs have two spellings (plain value or from broker.existingSecret)
    chart_env = list(dict.fromkeys(re.findall(r"^- name: (\w+)$", env_block, re.MULTILINE)))
    deployments = [doc for _, doc in plain_documents() if doc["kind"] == "Deployment"]

    for deployment in deployments:
        pod_spec = deployment["spec"]["template"]["spec"]
        for container in pod_spec["containers"] + pod_spec.get("initContainers", []):
            assert [e["name"] for e in container["env"]] == chart_env, container["name"]
    assert {"TESSERA_KUBE_NAMESPACE", "TESSERA_KUBE_MODE", "DATABASE_URL"} <= set(chart_env)
    assert len(deployments) == 3
