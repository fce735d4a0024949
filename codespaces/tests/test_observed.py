"""A codespace's waiting reason, location and failure are read from its workload, never copied, and the
workload follow-up runs as a task that takes ids, enqueued after the scheduling commit (issue 24)."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps as django_apps

from codespaces import observer, tasks
from codespaces.api.serializers import CodespaceSerializer
from codespaces.choices import CodespaceState as S
from codespaces.choices import DesiredState
from codespaces.models import Codespace
from codespaces.tests.factories import CodespaceFactory
from codespaces.tests.test_services import create
from scheduling.models import Gpu, PlacementGpu, Workload

pytestmark = pytest.mark.django_db


def _migration(name: str) -> Any:
    module = __import__(f"codespaces.migrations.{name}", fromlist=["Migration"])
    return module


def test_api_shows_where_the_workload_runs_now_without_any_codespace_write(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a running codespace on one GPU of h100-a
    codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    before = CodespaceSerializer(codespace).data
    assert (before["state"], before["node"]) == (S.RUNNING, "h100-a")
    version = Codespace.objects.values_list("version", flat=True).get(pk=codespace.pk)
    # when its placement moves to the other GPU and nobody tells the codespace
    share = PlacementGpu.objects.get(placement__workload_id=codespace.workload_id)
    other = Gpu.objects.get(node=share.gpu.node, index=1 - share.gpu.index)
    PlacementGpu.objects.filter(pk=share.pk).update(gpu=other)
    # then the API shows the new GPU at once, and the codespace row was not written
    codespace = Codespace.objects.get(pk=codespace.pk)
    assert CodespaceSerializer(codespace).data["gpus"] == f"gpu{other.index}"
    assert Codespace.objects.values_list("version", flat=True).get(pk=codespace.pk) == version


def test_a_failed_workload_gives_the_codespace_its_reason(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    Workload.objects.filter(pk=codespace.workload_id).update(
        state="failed", failure_reason="image pull failed"
    )
    codespace = Codespace.objects.get(pk=codespace.pk)
    assert (codespace.observed.phase, codespace.failure_reason) == (S.FAILED, "image pull failed")
    assert codespace.location == ""
    # and the follow-up records it on the timeline (the recorded phase follows)
    assert tasks.follow_codespace_workloads_task.delay([codespace.workload_id]).get() == {
        "changed": 1,
        "failed": 0,
        "failed_ids": [],
    }
    codespace.refresh_from_db()
    assert codespace.state == S.FAILED
    assert codespace.events.first().message == "Failed: image pull failed"  # type: ignore[union-attr]
    # a second run finds nothing to do (idempotent)
    assert (
        tasks.follow_codespace_workloads_task.delay([codespace.workload_id]).get()["changed"] == 0
    )


def test_observer_enqueues_the_follow_up_with_workload_ids(monkeypatch: Any) -> None:
    sent: list[Any] = []
    monkeypatch.setattr(tasks.follow_codespace_workloads_task, "delay", sent.append)
    observer.on_codespace_workloads_changed((7, 9))
    assert sent == [[7, 9]]


def test_a_reclaim_stops_the_codespace_and_records_the_desired_stop(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    Workload.objects.filter(pk=codespace.workload_id).update(
        state="released", pending_reason="reclaimed for team-b"
    )
    # what it is: stopped at once (derived), before any follow-up
    assert Codespace.objects.get(pk=codespace.pk).observed.phase == S.STOPPED
    tasks.follow_codespace_workloads_task.delay([codespace.workload_id]).get()
    codespace.refresh_from_db()
    assert (codespace.state, codespace.desired_state) == (S.STOPPED, DesiredState.STOPPED)
    assert list(codespace.events.order_by("id").values_list("to_state", flat=True))[-2:] == [
        S.STOPPING,
        S.STOPPED,
    ]


@pytest.mark.parametrize(
    ("state", "desired"),
    [
        (S.QUEUED, DesiredState.RUNNING),
        (S.RUNNING, DesiredState.RUNNING),
        (S.FAILED, DesiredState.RUNNING),
        (S.STOPPING, DesiredState.STOPPED),
        (S.STOPPED, DesiredState.STOPPED),
        (S.DELETING, DesiredState.DELETED),
        (S.DELETED, DesiredState.DELETED),
    ],
)
def test_the_data_migration_sets_the_desired_state_from_the_state(
    state: str, desired: str, bob: Any, team_a: Any, quota_a: Any
) -> None:
    # given an existing row from before the desired state (the column at its default)
    codespace = CodespaceFactory(owner=bob, tenant=team_a, quota=quota_a, state=state)
    Codespace.objects.filter(pk=codespace.pk).update(desired_state=DesiredState.RUNNING)
    # when the migration's data step runs
    _migration("0004_codespace_desired_state_from_state").desired_from_state(django_apps, None)
    # then the owner's wish is what the state said
    assert Codespace.objects.values_list("desired_state", flat=True).get(pk=codespace.pk) == desired
