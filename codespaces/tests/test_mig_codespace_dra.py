"""A `1g.10gb` MIG codespace in the Kubernetes backend's dra mode, on the in-memory cluster: the same
create → stop → start → delete as tests/kubernetes/test_dra_codespace_on_apiserver.py (which needs the
real API server), run with the database's services, cycle and tasks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from codespaces import services
from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace
from quotas.models import QuotaGroup
from scheduling.backends import registry
from scheduling.backends.kubernetes import constants as c
from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.config import KubeConfig
from scheduling.backends.kubernetes.dra import claim_name
from scheduling.backends.kubernetes.fake import FakeCluster
from scheduling.backends.kubernetes.interface import Kind
from scheduling.models import PlacementGpu
from scheduling.services import reconcile

pytestmark = pytest.mark.django_db

MIG_1G = services.SizeRequest(gpu_mode="mig", mig_profile="1g.10gb", gpu_count=0)
NS = "tessera-workloads"


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    cluster = FakeCluster()
    cluster.add_node("h100-a")
    registry.reset_backends()
    registry._instances["kubernetes"] = KubernetesBackend(
        cluster, KubeConfig(namespace=NS, mode=c.Mode.DRA)
    )
    with override_settings(TESSERA_BACKEND="kubernetes"):
        yield cluster
    registry.reset_backends()


@pytest.fixture
def mig_pool(gpu_pool: QuotaGroup) -> QuotaGroup:
    QuotaGroup.objects.filter(pk=gpu_pool.pk).update(sharing_mode="mig", mig_profiles=["1g.10gb"])
    return gpu_pool


def _schedule(fake: FakeCluster, pod: str) -> str:
    """Play the DRA scheduler: allocate the claim's pinned instance, bind, the kubelet runs it."""
    claim = fake.get_resource_claim(NS, claim_name(pod))
    assert claim is not None
    (request,) = claim["spec"]["devices"]["requests"]
    start = request["exactly"]["selectors"][0]["cel"]["expression"].rsplit("== ", 1)[1]
    device = f"gpu-0-mig-1g-10gb-{start}"
    fake.allocate_claim(
        NS, claim_name(pod), [(request["name"], "gpu.nvidia.com", "h100-a", device)]
    )
    fake.bind_pod(NS, pod, "h100-a")
    fake.set_pod_status(NS, pod, "Running", conditions=[{"type": "Ready", "status": "True"}])
    return f"gpu.nvidia.com/h100-a/{device}"


def _sync(capture: Any, codespace: Codespace) -> None:
    with capture(execute=True):
        reconcile.sync_status()
    codespace.refresh_from_db()


def _shares() -> list[tuple[str, int | None, str]]:
    return list(
        PlacementGpu.objects.filter(placement__released_at__isnull=True).values_list(
            "mig_profile", "mig_start", "allocated_device"
        )
    )


def test_a_1g_codespace_lives_through_claims_in_dra_mode(
    fake: FakeCluster,
    mig_pool: Any,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    with capture(execute=True):
        codespace = services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", name="bob-mig", size=MIG_1G
        )
    codespace.refresh_from_db()
    first = f"cs-bob-mig-{codespace.workload_id}"
    assert fake.objects(Kind.POD, NS) == [first]
    device = _schedule(fake, first)
    _sync(capture, codespace)
    assert codespace.state == S.RUNNING
    assert _shares() == [("1g.10gb", 6, device)]

    with capture(execute=True):
        services.stop_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.STOPPED
    assert fake.objects(Kind.POD, NS) == []
    assert fake.list_resource_claims(NS, c.MANAGED_SELECTOR) == []
    assert fake.objects(Kind.PVC, NS) == [codespace.home_volume_name]

    with capture(execute=True):
        services.start_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    second = f"cs-bob-mig-{codespace.workload_id}"
    assert second != first
    device = _schedule(fake, second)
    _sync(capture, codespace)
    assert codespace.state == S.RUNNING
    assert _shares() == [("1g.10gb", 6, device)]

    with capture(execute=True):
        services.delete_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.DELETED
    assert fake.objects(Kind.POD, NS) == []
    assert fake.list_resource_claims(NS, c.MANAGED_SELECTOR) == []
