"""Defragmentation moves a codespace only when its template allows it and it is idle or its owner agreed;
the owner's timeline says why it moved, before and after, and the home volume is kept."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from codespaces.choices import CodespaceState as S
from codespaces.choices import EventKind
from codespaces.models import Codespace, CodespaceTemplate
from codespaces.tests.defrag_scenario import codespace_blocking_a_node, settle
from scheduling.choices import DefragPlanState, WorkloadState
from scheduling.models import Workload
from scheduling.services.defrag import apply_defrag, preview_defrag

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _open_policy(settings: Any) -> None:
    settings.TESSERA_DEFRAG_MIN_RUNTIME_SECONDS = 0


def moved_ids(group_id: int) -> set[int]:
    return set(preview_defrag(group_id).moves.values_list("workload_id", flat=True))


def test_a_codespace_in_use_without_consent_is_not_moved_but_an_idle_one_is(
    bob: Any, team_a: Any
) -> None:
    scene = codespace_blocking_a_node(bob, team_a, consent=False)
    assert scene.codespace.state == S.RUNNING
    assert scene.codespace.workload_id not in moved_ids(scene.group_id)
    Codespace.objects.filter(pk=scene.codespace.pk).update(idle_warned_at=timezone.now())
    assert scene.codespace.workload_id in moved_ids(scene.group_id)


def test_a_template_that_forbids_moves_keeps_its_codespaces_in_place(bob: Any, team_a: Any) -> None:
    scene = codespace_blocking_a_node(bob, team_a)
    CodespaceTemplate.objects.update(defrag_movable=False)
    assert scene.codespace.workload_id not in moved_ids(scene.group_id)


def test_the_moved_codespace_restarts_elsewhere_with_its_home_and_its_timeline_says_why(
    bob: Any, team_a: Any
) -> None:
    scene = codespace_blocking_a_node(bob, team_a)
    old_workload = Workload.objects.get(pk=scene.codespace.workload_id)
    plan = preview_defrag(scene.group_id)
    move = plan.moves.get()
    assert move.workload_id == scene.codespace.workload_id
    plan = apply_defrag(plan.pk)
    assert plan.state == DefragPlanState.APPLIED, plan.error
    settle()
    settle()
    codespace = Codespace.objects.get(pk=scene.codespace.pk)
    assert codespace.state == S.RUNNING
    assert codespace.node_name == move.to_node != move.from_node
    workload = Workload.objects.get(pk=codespace.workload_id)
    assert workload.home_volume == old_workload.home_volume != ""
    assert Workload.objects.get(pk=scene.waiting.pk).state in (
        WorkloadState.PLACED,
        WorkloadState.RUNNING,
    )
    notices = list(
        codespace.events.filter(kind=EventKind.NOTICE, data__defrag_plan=plan.pk)
        .order_by("id")
        .values_list("message", flat=True)
    )
    assert len(notices) == 2
    before, after = notices
    assert before.startswith(
        f"Moved to free 1 H100 GPU on {move.from_node} for a waiting 8-GPU job "
        f"{team_a.slug}/big (defragmentation)"
    )
    assert "the home volume is kept" in before
    assert after == (
        f"Moved from {move.from_node} to {move.to_node} by defragmentation plan {plan.pk}."
    )


def test_the_owner_allows_moves_while_in_use_from_the_codespace_page(bob: Any, team_a: Any) -> None:
    from django.test import Client

    scene = codespace_blocking_a_node(bob, team_a, consent=False)
    c = Client()
    c.force_login(bob)
    page = c.get(f"/codespaces/{scene.codespace.pk}/").content.decode()
    assert "moves it only when idle" in page
    r = c.post(f"/codespaces/{scene.codespace.pk}/move-consent/", {"consent": "yes"})
    assert r.status_code == 302
    assert Codespace.objects.get(pk=scene.codespace.pk).move_consent is True
    assert scene.codespace.workload_id in moved_ids(scene.group_id)
    bad = c.post(
        f"/codespaces/{scene.codespace.pk}/move-consent/", {"consent": "maybe"}, follow=True
    )
    assert "consent: choose yes or no." in bad.content.decode()
    assert Codespace.objects.get(pk=scene.codespace.pk).move_consent is True
