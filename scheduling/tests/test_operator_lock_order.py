"""Operator actions take every shard lock they need up front, in ascending group id (docs/adr/0002),
even when what runs on the node belongs to a group the node no longer matches (#4)."""

from __future__ import annotations

import pytest

from scheduling import lock_objects, services
from scheduling.choices import WorkloadState
from scheduling.models import Node, Workload
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db


def test_failing_a_relabelled_node_locks_its_shards_in_ascending_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a workload of group "first" on a node that was relabelled into group "second" since
    first = make_group("first")
    second = make_group("second")
    assert first.pk < second.pk
    small_cluster("first", gpu_nodes=1, gpus_per_node=4)
    quota = make_quota(first)
    w = services.submit_workload(
        tenant=quota.tenant, quota=quota, kind="job_pod", name="train", cpu_milli=1000,
        memory_mib=1024, gpu_count=1, gpu_milli=1000,
    )  # fmt: skip
    assert services.run_cycle(first.pk).placed == 1
    node = Node.objects.get()
    Node.objects.filter(pk=node.pk).update(labels={**node.labels, "pool": "second"})
    taken: list[int] = []
    real_lock_shard = lock_objects.lock_shard

    def recording_lock_shard(group_id: int) -> None:
        taken.append(group_id)
        real_lock_shard(group_id)

    monkeypatch.setattr(lock_objects, "lock_shard", recording_lock_shard)
    # when an operator fails the node
    assert services.fail_node(node.pk) == [w.pk]
    # then both shards were locked up front, the lower id first (taking a held one again is free)
    assert taken[:2] == [first.pk, second.pk]
    assert list(dict.fromkeys(taken)) == [first.pk, second.pk]
    assert Workload.objects.get(pk=w.pk).state == WorkloadState.PENDING
