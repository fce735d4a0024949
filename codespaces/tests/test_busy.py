"""Codespace actions run as one retried transaction: one lost lock race is run again and answers as
if there had been none; a codespace whose every attempt loses answers 503 `busy` and changes
nothing, never a 500 (docs/adr/0002)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg.errors
import pytest

from codespaces import services
from codespaces.choices import CodespaceState as S
from codespaces.models import Codespace, CodespaceEvent
from codespaces.tests.test_services import create
from portal import transactions
from portal.tests.locks import lost_race
from scheduling import services as scheduling_services
from scheduling.choices import WorkloadState
from scheduling.models import Placement, Workload
from scheduling.services import workloads

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    settings.TESSERA_DB_RETRY_ATTEMPTS = 3
    monkeypatch.setattr(transactions.time, "sleep", lambda seconds: None)


def losing(times: int | None, then: Callable[..., Any]) -> tuple[Callable[..., Any], list[int]]:
    """A stand-in for `then` that deadlocks the first `times` calls (every call when None)."""
    attempts: list[int] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        attempts.append(1)
        if times is None or len(attempts) <= times:
            raise lost_race(psycopg.errors.DeadlockDetected())
        return then(*args, **kwargs)

    return call, attempts


def test_codespace_stop_that_loses_every_lock_race_answers_503_and_changes_nothing(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    api_as: Any,
    no_backoff: None,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given bob's running codespace, and a database where releasing its placement always deadlocks
    codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    assert codespace.state == S.RUNNING
    events = CodespaceEvent.objects.filter(codespace=codespace).count()
    finish, attempts = losing(None, workloads._finish)
    monkeypatch.setattr(workloads, "_finish", finish)
    api = api_as(bob)
    api.raise_request_exception = False
    # when he stops it
    response = api.post(f"/api/v1/codespaces/{codespace.pk}/stop/")
    # then the API says to retry, after trying 3 times, and the codespace runs on as it was
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "busy"
    assert response["Retry-After"] == "1"
    assert len(attempts) == 3
    saved = Codespace.objects.get(pk=codespace.pk)
    assert (saved.state, saved.version) == (S.RUNNING, codespace.version)
    assert Workload.objects.get(pk=codespace.workload_id).state == WorkloadState.RUNNING
    assert Placement.objects.filter(workload_id=codespace.workload_id, released_at__isnull=True)
    assert CodespaceEvent.objects.filter(codespace=codespace).count() == events


def test_codespace_stop_that_loses_one_lock_race_is_run_again_and_stops(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    api_as: Any,
    no_backoff: None,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    finish, attempts = losing(1, workloads._finish)
    monkeypatch.setattr(workloads, "_finish", finish)
    response = api_as(bob).post(f"/api/v1/codespaces/{codespace.pk}/stop/")
    assert response.status_code == 200
    assert response.json()["state"] == "stopped"
    assert len(attempts) == 2
    assert Workload.objects.get(pk=codespace.workload_id).state == WorkloadState.RELEASED
    # one stopping and one stopped entry: the lost attempt left nothing behind
    kinds = list(
        CodespaceEvent.objects.filter(codespace=codespace, to_state__in=[S.STOPPING, S.STOPPED])
        .order_by("pk")
        .values_list("to_state", flat=True)
    )
    assert kinds == [S.STOPPING, S.STOPPED]


def test_codespace_delete_that_loses_one_lock_race_is_run_again_and_deletes(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    no_backoff: None,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    finish, attempts = losing(1, workloads._finish)
    monkeypatch.setattr(workloads, "_finish", finish)
    deleted = services.delete_codespace(codespace, actor=bob)
    assert deleted.state == S.DELETED
    assert len(attempts) == 2
    assert Codespace.objects.get(pk=codespace.pk).state == S.DELETED


def test_codespace_start_that_loses_one_lock_race_is_run_again_and_queues(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    no_backoff: None,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        services.stop_codespace(codespace, actor=bob)
    submit, attempts = losing(1, scheduling_services.submit_workload)
    monkeypatch.setattr(scheduling_services, "submit_workload", submit)
    started = services.start_codespace(codespace, actor=bob)
    assert started.state == S.QUEUED
    assert len(attempts) == 2
    saved = Codespace.objects.get(pk=codespace.pk)
    assert saved.state == S.QUEUED
    assert Workload.objects.filter(home_volume=saved.home_volume_name).count() == 2


def test_codespace_create_that_loses_one_lock_race_is_run_again_and_creates_one(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    no_backoff: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    submit, attempts = losing(1, scheduling_services.submit_workload)
    monkeypatch.setattr(scheduling_services, "submit_workload", submit)
    created = services.create_codespace(
        user=bob, tenant=team_a, name="bob-dev", template="pytorch", preset="quarter-h100"
    )
    assert created.state == S.QUEUED
    assert len(attempts) == 2
    assert Codespace.objects.filter(name="bob-dev").count() == 1
    assert Workload.objects.filter(name="bob-dev").count() == 1
