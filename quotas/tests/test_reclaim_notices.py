"""Polite reclaim's settings and reclaim plan through the API and the quota page, and the pure plan."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from portal.tests.factories import UserFactory
from quotas.models import QuotaChange, QuotaGroup, ReclaimNotice, ReclaimNoticeState
from quotas.reclaim import Victim
from quotas.reclaim_notices import LiveNotice, plan_notices
from quotas.resources import Resources, Side
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def victim(*ids: int) -> Victim:
    return Victim(ids, None, f"w{ids[0]}", ("job_pod",), 1, "team", Side.GPU, 0, Resources(), "r")


def test_the_plan_gives_notice_counts_down_executes_when_due_and_cancels_the_unneeded() -> None:
    later = NOW + timedelta(seconds=300)
    first = plan_notices([victim(1), victim(2, 3)], [], now=NOW, notice_seconds=300)
    assert [(n.workload_id, n.deadline) for n in first.give] == [(1, later), (2, later), (3, later)]
    assert (first.execute, first.cancel, first.stop_now) == ((), (), ())

    live = [LiveNotice(10, 1, later), LiveNotice(11, 2, later), LiveNotice(12, 3, later)]
    counting = plan_notices([victim(1), victim(2, 3)], live, now=NOW + timedelta(seconds=299),
                            notice_seconds=300)  # fmt: skip
    assert counting.is_empty

    due = plan_notices([victim(2, 3)], live, now=later, notice_seconds=300)
    assert (due.execute, due.cancel) == ((11, 12), (10,))  # workload 1 is no longer needed
    assert [v.workload_ids for v in due.stop_now] == [(2, 3)]

    immediate = plan_notices([victim(4)], [], now=NOW, notice_seconds=0)
    assert ([v.workload_ids for v in immediate.stop_now], immediate.give) == ([(4,)], ())


@pytest.fixture
def reclaim_pool(team_a: Any, team_b: Any) -> dict[str, Any]:
    group = QuotaGroupFactory(name="training")
    a = QuotaFactory(group=group, tenant=team_a, name="team-a")
    b = QuotaFactory(group=group, tenant=team_b, name="team-b")
    notice = ReclaimNotice.objects.create(
        group=group, quota=a, claimant_quota=b, claimant_workload_ids=[99], workload_id=42,
        workload_name="train-0", workload_kind="job_pod", owner_username="alice",
        victim_name="train-0", reason="team-b needs its guaranteed min", noticed_at=NOW,
        deadline=NOW + timedelta(seconds=300),
    )  # fmt: skip
    return {"group": group, "a": a, "b": b, "notice": notice}


@pytest.mark.django_db
def test_both_teams_see_the_reclaim_plan_in_the_api_and_others_do_not(
    reclaim_pool: dict[str, Any], api_as: Any, alice: Any, charlie: Any
) -> None:
    other = UserFactory(username="mallory")
    with time_machine.travel(NOW + timedelta(seconds=60), tick=False):
        mine = api_as(alice).get(f"/api/v1/quotas/{reclaim_pool['a'].pk}/reclaim-notices/")
        bad = api_as(alice).get(
            f"/api/v1/quotas/{reclaim_pool['a'].pk}/reclaim-notices/?state=soon"
        )
        theirs = api_as(charlie).get(f"/api/v1/quotas/{reclaim_pool['b'].pk}/reclaim-notices/")
        hidden = api_as(other).get(f"/api/v1/quotas/{reclaim_pool['a'].pk}/reclaim-notices/")
    assert mine.status_code == 200
    (row,) = mine.json()
    assert (row["workload"], row["owner"], row["claimant_quota"], row["state"]) == (
        "train-0", "alice", "team-b", "noticed",
    )  # fmt: skip
    assert (row["deadline"], row["seconds_left"]) == ("2026-12-02T12:05:00Z", 240)
    assert [r["id"] for r in theirs.json()] == [row["id"]]  # the claimant team sees it too
    assert bad.status_code == 400
    assert "state" in bad.json()["error"]["fields"]
    assert hidden.status_code == 404


@pytest.mark.django_db
def test_operators_set_the_notice_and_the_hook_audited_and_bad_input_names_the_field(
    reclaim_pool: dict[str, Any], api_as: Any, operator: Any, alice: Any
) -> None:
    group, quota = reclaim_pool["group"], reclaim_pool["a"]
    ops = api_as(operator)
    too_long = ops.post(f"/api/v1/quota-groups/{group.pk}/reclaim-notice/",
                        {"reclaim_notice_seconds": 3601}, format="json")  # fmt: skip
    refused = api_as(alice).post(f"/api/v1/quota-groups/{group.pk}/reclaim-notice/",
                                 {"reclaim_notice_seconds": 60}, format="json")  # fmt: skip
    saved = ops.post(f"/api/v1/quota-groups/{group.pk}/reclaim-notice/",
                     {"reclaim_notice_seconds": 300}, format="json")  # fmt: skip
    bad_url = ops.post(f"/api/v1/quotas/{quota.pk}/reclaim-settings/",
                       {"checkpoint_webhook_url": "ftp://x"}, format="json")  # fmt: skip
    hook = ops.post(f"/api/v1/quotas/{quota.pk}/reclaim-settings/",
                    {"checkpoint_webhook_url": "https://ci.example/ckpt",
                     "equal_borrowing_share": True}, format="json")  # fmt: skip
    assert too_long.status_code == 400
    assert "reclaim_notice_seconds" in too_long.json()["error"]["fields"]
    assert refused.status_code in (403, 404)
    assert (saved.status_code, saved.json()["reclaim_notice_seconds"]) == (200, 300)
    assert bad_url.status_code == 400
    assert "checkpoint_webhook_url" in bad_url.json()["error"]["fields"]
    assert hook.status_code == 200
    assert (hook.json()["checkpoint_webhook_url"], hook.json()["equal_borrowing_share"]) == (
        "https://ci.example/ckpt", True,
    )  # fmt: skip
    assert QuotaGroup.objects.get(pk=group.pk).reclaim_notice_seconds == 300
    changes = QuotaChange.objects.order_by("id")
    assert [(c.subject, c.after) for c in changes] == [
        ("group", {"reclaim_notice_seconds": 300}),
        ("reclaim", {"checkpoint_webhook_url": "https://ci.example/ckpt",
                     "equal_borrowing_share": True}),
    ]  # fmt: skip


@pytest.mark.django_db
def test_the_quota_page_shows_the_plan_and_the_settings_form_refuses_bad_input(
    reclaim_pool: dict[str, Any], client: Any, operator: Any, alice: Any
) -> None:
    url = f"/quotas/{reclaim_pool['a'].pk}/"
    client.force_login(alice)
    with time_machine.travel(NOW + timedelta(seconds=60), tick=False):
        page = client.get(url).content.decode()
    assert 'data-testid="reclaim-plan"' in page
    assert "train-0 (job_pod)" in page
    assert "noticed (in 240 s)" in page
    assert "2026-12-02 12:05:00" in page
    client.force_login(operator)
    action = f"/quotas/{reclaim_pool['a'].pk}/fairness/"
    bad = client.post(action, {"action": "reclaim_settings", "reclaim_notice_seconds": "99999"})
    assert bad.status_code == 400
    assert QuotaGroup.objects.get(pk=reclaim_pool["group"].pk).reclaim_notice_seconds == 0
    done = client.post(action, {"action": "reclaim_settings", "reclaim_notice_seconds": "120",
                                "checkpoint_webhook_url": "https://ci.example/h"})  # fmt: skip
    assert done.status_code == 302
    assert QuotaGroup.objects.get(pk=reclaim_pool["group"].pk).reclaim_notice_seconds == 120
    assert "gets 120 s of notice" in client.get(url).content.decode()
    assert ReclaimNotice.objects.get().state == ReclaimNoticeState.NOTICED
