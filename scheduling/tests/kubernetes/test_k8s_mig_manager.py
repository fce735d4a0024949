"""Dynamic MIG through NVIDIA's MIG manager, over HTTP against kmock: Tessera writes the node's mig-parted
config into the manager's ConfigMap and labels the node ``nvidia.com/mig.config``; the test plays the MIG
manager by setting ``nvidia.com/mig.config.state``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from k8s_apiserver import LoopbackApiServer
from k8s_builders import config
from kubernetes import client

from scheduling.backends.base import MigLayoutPhase, MigLayoutRequest
from scheduling.backends.kubernetes import mig_manager
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.constants import Mode
from scheduling.backends.kubernetes.gateway import KubernetesGateway
from scheduling.backends.kubernetes.interface import ClusterApiError

NODE = "h100-03"
OPERATOR_NS = "gpu-operator"
CONFIG_MAP = "tessera-mig-parted-config"


def _request(
    new: tuple[tuple[str, int], ...] = (("1g.10gb", 0), ("3g.40gb", 4)),
) -> MigLayoutRequest:
    return MigLayoutRequest(
        reconfiguration_id=1,
        node_name=NODE,
        gpu_index=0,
        gpu_uuid="GPU-a",
        gpu_model="H100-80GB",
        old_layout=(),
        new_layout=new,
        node_layouts=((0, new), (1, (("7g.80gb", 0),))),
        requested_at=datetime(2026, 12, 2, tzinfo=UTC),
    )


@pytest.fixture
def apiserver() -> Iterator[LoopbackApiServer]:
    with LoopbackApiServer() as server:
        server.add_object(
            "v1/nodes",
            None,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": NODE,
                    "labels": {
                        "nvidia.com/mig.strategy": "mixed",
                        mig_manager.MIG_CONFIG_LABEL: "all-disabled",
                        mig_manager.MIG_CONFIG_STATE_LABEL: "success",
                    },
                },
            },
        )
        yield server


@pytest.fixture
def backend(apiserver: LoopbackApiServer) -> KubernetesBackend:
    configuration = client.Configuration(host=apiserver.url)
    gateway = KubernetesGateway(client.ApiClient(configuration), connect_timeout=2, read_timeout=5)
    return KubernetesBackend(gateway, config())


def _labels(apiserver: LoopbackApiServer) -> dict[str, str]:
    return apiserver.stored("v1/nodes", None, NODE)["metadata"].get("labels") or {}


def _writes(apiserver: LoopbackApiServer) -> list[str]:
    return [
        f"{r.method} {r.url.path}"
        for r in apiserver.requests(lambda r: str(r.method).upper() in ("POST", "PUT", "PATCH"))
    ]


def test_the_node_is_labelled_with_a_generated_config_and_ready_only_on_the_managers_success(
    apiserver: LoopbackApiServer, backend: KubernetesBackend
) -> None:
    request = _request()
    name = mig_manager.config_name(NODE, request.node_layouts)
    backend.apply_mig_layout(request)

    stored = apiserver.stored("v1/configmaps", OPERATOR_NS, CONFIG_MAP)
    document = json.loads(stored["data"]["config.yaml"])
    assert document == {
        "version": "v1",
        "mig-configs": {
            name: [
                {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 1, "3g.40gb": 1}},
                {"devices": [1], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
            ]
        },
    }
    labels = _labels(apiserver)
    assert labels[mig_manager.MIG_CONFIG_LABEL] == name
    # the old config's "success" is gone with it: never read as this config's
    assert mig_manager.MIG_CONFIG_STATE_LABEL not in labels
    assert backend.mig_layout_status(request).phase is MigLayoutPhase.PENDING

    apiserver.set_node_label(NODE, mig_manager.MIG_CONFIG_STATE_LABEL, "pending")
    status = backend.mig_layout_status(request)
    assert (status.phase, status.message) == (MigLayoutPhase.PENDING, "MIG manager state: pending")

    writes = _writes(apiserver)
    backend.apply_mig_layout(request)  # asked again (a retried drive): nothing is written
    assert _writes(apiserver) == writes

    apiserver.set_node_label(NODE, mig_manager.MIG_CONFIG_STATE_LABEL, "success")
    assert backend.mig_layout_status(request).phase is MigLayoutPhase.READY


def test_the_managers_failure_is_reported_with_its_label(
    apiserver: LoopbackApiServer, backend: KubernetesBackend
) -> None:
    request = _request()
    backend.apply_mig_layout(request)
    apiserver.set_node_label(NODE, mig_manager.MIG_CONFIG_STATE_LABEL, "failed")
    status = backend.mig_layout_status(request)
    assert status.phase is MigLayoutPhase.FAILED
    assert status.message == "NVIDIA's MIG manager reported nvidia.com/mig.config.state=failed"


def test_a_config_with_an_invalid_layout_is_refused_before_anything_is_written(
    apiserver: LoopbackApiServer, backend: KubernetesBackend
) -> None:
    with pytest.raises(ClusterApiError) as refused:
        backend.apply_mig_layout(_request((("1g.10gb", 0), ("7g.80gb", 0))))
    assert refused.value.permanent
    assert (
        refused.value.message == "invalid MIG config: GPU 0: 7g.80gb at 0 overlaps another instance"
    )
    assert _writes(apiserver) == []


def test_dra_mode_refuses_dynamic_mig_by_reconfiguration(apiserver: LoopbackApiServer) -> None:
    configuration = client.Configuration(host=apiserver.url)
    gateway = KubernetesGateway(client.ApiClient(configuration), connect_timeout=2, read_timeout=5)
    backend = KubernetesBackend(gateway, config(Mode.DRA))
    with pytest.raises(ClusterApiError) as refused:
        backend.apply_mig_layout(_request())
    assert refused.value.permanent
    assert "NVIDIA's DRA driver creates MIG devices at allocation itself" in refused.value.message
    assert _writes(apiserver) == []


def test_config_names_are_label_values_that_follow_the_layouts() -> None:
    layouts = _request().node_layouts
    name = mig_manager.config_name("a" * 80, layouts)
    assert len(name) <= 63
    assert name.startswith("tessera-")
    assert mig_manager.config_name(NODE, layouts) == mig_manager.config_name(NODE, layouts)
    assert mig_manager.config_name(NODE, layouts) != mig_manager.config_name(NODE, ((0, ()),))
    # an empty card keeps MIG on with no instance (mig-parted requires mig-devices when enabled)
    assert mig_manager.node_config(((0, ()),)) == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {}}
    ]
