"""A backlog of cycle triggers drains with one cycle (issue 38): every trigger of a shard's cycle is a
sweep (portal.periodic `claim_sweep`), so the copies queued while its worker was down, sent before a
cycle that then started, are skipped instead of each running a whole cycle."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from portal.celery import SENT_AT_HEADER, SWEEP_HEADER
from scheduling import tasks
from scheduling.tests.factories import make_group, make_quota, small_cluster

pytestmark = pytest.mark.django_db


def run_as_worker(task_id: str, group_id: int, sent_ago: float) -> Any:
    """Run a cycle the way a worker runs a message beat or a trigger sent `sent_ago` seconds ago."""
    sent = (timezone.now() - timedelta(seconds=sent_ago)).timestamp()
    tasks.run_cycle_task.push_request(
        id=task_id,
        called_directly=False,
        **{SWEEP_HEADER: f"cycle:{group_id}", SENT_AT_HEADER: sent},
    )
    try:
        return tasks.run_cycle_task(group_id)
    finally:
        tasks.run_cycle_task.pop_request()


def test_every_trigger_of_a_cycle_is_sent_as_a_sweep_of_its_shard(monkeypatch: Any) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(tasks.run_cycle_task, "apply_async", lambda *a, **kw: sent.append(kw))
    tasks.send_cycle(7)
    tasks.TaskFollowUps().run_cycle(8)
    assert [kw["headers"] for kw in sent] == [{SWEEP_HEADER: "cycle:7"}, {SWEEP_HEADER: "cycle:8"}]


def test_queued_copies_sent_before_a_cycle_started_are_skipped_and_later_ones_run() -> None:
    # given a shard whose worker comes back to three queued triggers
    small_cluster(gpu_nodes=1, gpus_per_node=1)
    group = make_quota(make_group()).group
    # when the oldest runs, the two sent before it started are covered by it
    assert run_as_worker("first", group.pk, sent_ago=30)["group_id"] == group.pk
    assert run_as_worker("covered-1", group.pk, sent_ago=20) is None
    assert run_as_worker("covered-2", group.pk, sent_ago=10) is None
    # and a trigger sent after that cycle started runs a cycle again
    assert run_as_worker("later", group.pk, sent_ago=-1)["group_id"] == group.pk
