"""A codespace's stored `state` is a cache of its derived phase (`Codespace.phase`, from
`codespaces.phase.observe`): after every action and every workload change, once the follow-ups ran, it
equals the phase, and the auditor's `codespace_state` invariant (which derives the phase with the same
function) finds nothing. A seeded random walk through the real services, the cycle and the simulated
backend (issue 24)."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from codespaces import lifecycle, services
from codespaces.choices import CodespaceState as S
from codespaces.choices import DesiredState
from codespaces.models import Codespace
from codespaces.phase import observed_phase
from codespaces.tests.test_services import create
from portal.errors import Conflict
from scheduling import services as scheduling_services
from scheduling.choices import WorkloadState
from scheduling.services import audit, reconcile

pytestmark = pytest.mark.django_db

HOLDING = (WorkloadState.PENDING, WorkloadState.PLACED, WorkloadState.RUNNING)


def test_a_new_codespace_starts_at_the_phase_of_one_without_a_workload() -> None:
    assert Codespace._meta.get_field("state").default == lifecycle.INITIAL_STATE
    assert lifecycle.INITIAL_STATE == observed_phase(DesiredState.RUNNING, None) == S.QUEUED


def _holding(codespaces: list[Codespace]) -> list[Codespace]:
    return [c for c in codespaces if c.workload is not None and c.workload.state in HOLDING]


def _step(
    rng: random.Random, step: int, bob: Any, team_a: Any, live: list[Codespace]
) -> tuple[str, list[int]]:
    """One random operation by the owner or the scheduler; returns its name and the codespaces it
    aimed at. Refused actions (a stop of a stopped one, ...) are part of the walk."""
    operation = rng.choice(
        # the backend reports pods running as often as anything else happens
        ["create", "stop", "start", "delete", "keep", "fail", "requeue", "reclaim"] + ["run"] * 4
    )
    if operation == "create" or not live:
        if len(live) < 2:  # the template allows two per user
            codespace = services.create_codespace(
                user=bob,
                tenant=team_a,
                name=f"bob-{step}",
                template="pytorch",
                preset="quarter-h100",
            )
            return "create", [codespace.pk]
        operation = "run"
    if operation == "run":
        reconcile.sync_status()
        return "run", []
    if operation in ("stop", "start", "delete", "keep"):
        codespace = rng.choice(live)
        actions: dict[str, Callable[..., Codespace]] = {
            "stop": services.stop_codespace,
            "start": services.start_codespace,
            "delete": services.delete_codespace,
            "keep": services.keep_codespace,
        }
        action = actions[operation]
        try:
            action(codespace, actor=bob)
        except Conflict:
            pass
        return operation, [codespace.pk]
    holding = _holding(live)
    if not holding:
        return operation, []
    codespace = rng.choice(holding)
    workload_id = codespace.workload_id
    assert workload_id is not None
    if operation == "fail":
        scheduling_services.fail_workloads([workload_id], reason="image pull failed")
    elif operation == "requeue":
        scheduling_services.requeue_workloads(
            [workload_id], reason="its GPU failed", code="gpu_failure"
        )
    else:
        scheduling_services.release_workload(workload_id, reason="reclaimed for team-b")
    return operation, [codespace.pk]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_stored_state_equals_the_observed_phase_after_every_step(
    seed: int,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    rng = random.Random(seed)
    seen: set[str] = set()
    for step in range(30):
        live = list(
            Codespace.objects.exclude(state=S.DELETED).select_related("workload").order_by("pk")
        )
        with django_capture_on_commit_callbacks(execute=True):
            operation, targets = _step(rng, step, bob, team_a, live)
        for codespace in Codespace.objects.select_related("workload").order_by("pk"):
            seen.add(codespace.state)
            assert codespace.state == codespace.phase, (seed, step, operation, targets)
        later = timezone.now() + timedelta(minutes=10)
        report = audit.run_audit(now=later, only=["codespace_state"])
        assert report.result("codespace_state").findings == (), (seed, step, operation)
    # the walk went through the life of a codespace, not only its first state
    assert {S.RUNNING, S.STOPPED}.issubset(seen), seen


def test_the_auditor_names_the_observed_phase_of_a_stale_cache(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a running codespace whose workload failed while its follow-up was lost
    codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    assert codespace.state == S.RUNNING
    with django_capture_on_commit_callbacks(execute=False):
        assert codespace.workload_id is not None
        scheduling_services.fail_workloads([codespace.workload_id], reason="image pull failed")
    # then the page shows it failed at once, and the auditor reports the stale cache with both
    codespace = Codespace.objects.get(pk=codespace.pk)
    assert (codespace.state, codespace.phase) == (S.RUNNING, S.FAILED)
    report = audit.run_audit(now=timezone.now() + timedelta(minutes=10), only=["codespace_state"])
    assert [
        (f["codespace_id"], f["codespace_state"], f["observed_phase"], f["workload_state"])
        for f in report.result("codespace_state").findings
    ] == [(codespace.pk, S.RUNNING, S.FAILED, WorkloadState.FAILED)]
