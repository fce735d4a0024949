"""A fragmented H100 pool with a codespace on one node (scheduling.tests.defrag_scenario, with bob's
codespace in place of the first job): moving it frees the node the waiting 8-GPU job needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.test import TestCase

from codespaces import services
from codespaces.models import Codespace
from codespaces.tests.factories import CodespaceTemplateFactory, TemplatePresetFactory
from scheduling import services as scheduling
from scheduling.models import Node, Workload
from scheduling.services.reconcile import sync_status
from scheduling.tests.defrag_scenario import BIG, SMALL, place_on, submit
from scheduling.tests.factories import make_group, make_quota, small_cluster


@dataclass
class CodespaceBlocking:
    codespace: Codespace
    job: Workload
    waiting: Workload
    group_id: int


def settle() -> None:
    """What beat does: the simulated pods report running, codespaces follow (on-commit work runs)."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        sync_status()


def codespace_blocking_a_node(
    owner: Any, tenant: Any, *, consent: bool = True
) -> CodespaceBlocking:
    small_cluster(gpu_nodes=2, gpus_per_node=8, model="H100", gpu_memory_mib=81920)
    quota = make_quota(make_group(), tenant, name=tenant.slug)
    template = CodespaceTemplateFactory(name="pytorch", display_name="PyTorch")
    TemplatePresetFactory(
        template=template,
        name="quarter-h100",
        label="1/4 H100",
        gpu_model="H100",
        position=0,
    )
    g0, g1 = Node.objects.get(name="training-g0"), Node.objects.get(name="training-g1")
    scheduling.cordon_node(g1.pk, reason="test: steer the codespace to g0")
    with TestCase.captureOnCommitCallbacks(execute=True):
        codespace = services.create_codespace(
            user=owner, tenant=tenant, template="pytorch", preset="quarter-h100", name="bob-dev"
        )
    scheduling.run_cycle(quota.group_id)
    scheduling.uncordon_node(g1.pk)
    settle()
    settle()
    job = place_on(g1, g0, lambda: submit(quota, "small-b", SMALL), quota.group_id)
    waiting = submit(quota, "big", BIG)
    scheduling.run_cycle(quota.group_id)
    Codespace.objects.filter(pk=codespace.pk).update(move_consent=consent)
    codespace.refresh_from_db()
    waiting.refresh_from_db()
    return CodespaceBlocking(codespace, job, waiting, quota.group_id)
