"""Fixtures of the real-control-plane suite: one etcd + kube-apiserver + KWOK per test session.

The stack is built (once, cached) and started by `tests/kubernetes/stack.py`. When it cannot be
built or does not start, every test here is skipped with the reason, or fails under
TESSERA_REQUIRE_KUBE=1 (CI).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from kubernetes import client, config

from scheduling.backends.kubernetes.gateway import KubernetesGateway
from tests.kubernetes.stack import KubeStack, StackUnavailable, build_binaries


def unavailable(exc: StackUnavailable) -> NoReturn:
    message = f"the real Kubernetes test stack is unavailable: {exc}"
    if os.environ.get("TESSERA_REQUIRE_KUBE") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kube_bin() -> Path:
    """The directory with kube-apiserver, etcd, kwok and helm (built once, then cached)."""
    try:
        return build_binaries()
    except StackUnavailable as exc:
        unavailable(exc)


@pytest.fixture(scope="session")
def kube_stack(kube_bin: Path) -> Iterator[KubeStack]:
    """A running control plane (admin kubeconfig at `kube_stack.kubeconfig`)."""
    try:
        stack = KubeStack(kube_bin).start()
    except StackUnavailable as exc:
        unavailable(exc)
    yield stack
    stack.stop()


def gateway_for(kubeconfig: str) -> KubernetesGateway:
    """The backend's own gateway over the official client, from a kubeconfig file."""
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=kubeconfig, client_configuration=configuration, persist_config=False
    )
    return KubernetesGateway(client.ApiClient(configuration), connect_timeout=5, read_timeout=30)


@pytest.fixture
def admin_gateway(kube_stack: KubeStack) -> KubernetesGateway:
    return gateway_for(str(kube_stack.kubeconfig))


@pytest.fixture
def namespace(kube_stack: KubeStack) -> str:
    """A fresh namespace with its `default` ServiceAccount (no controller-manager runs here to
    create it, and pod admission needs it). Namespaces are not deleted: without a controller-manager
    they would stay Terminating; the stack is thrown away at the end of the session."""
    name = f"tw-{uuid.uuid4().hex[:10]}"
    create_namespace(kube_stack, name)
    return name


def create_namespace(stack: KubeStack, name: str) -> None:
    status, body = stack.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    assert status in (201, 409), body
    status, body = stack.request(
        "POST",
        f"/api/v1/namespaces/{name}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
    )
    assert status in (201, 409), body
