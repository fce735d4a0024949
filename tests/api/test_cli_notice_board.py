"""`tessera reclaim-notices list`: the reclaim-notices board through the CLI against a live server with
real tokens (operators see every group, a member their team's notices; bad filters name the field)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal import cli
from portal.services import issue_token
from quotas.models import ReclaimNotice, ReclaimNoticeState
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory
from tests.api.test_cli import config_file, run  # noqa: F401  (the fixture and the runner)

pytestmark = pytest.mark.django_db(transaction=True)


def _notice(quota: Any, claimant: Any, name: str, workload_id: int, **fields: Any) -> Any:
    now = timezone.now().replace(microsecond=0)
    values: dict[str, Any] = {"noticed_at": now, "deadline": now + timedelta(minutes=5)}
    values.update(fields)
    return ReclaimNotice.objects.create(
        group=quota.group, quota=quota, claimant_quota=claimant, workload_id=workload_id,
        workload_name=name, workload_kind="job_pod", owner_username="alice", victim_name=name,
        reason="min back", **values,
    )  # fmt: skip


def test_the_cli_lists_the_board_per_viewer_and_filter_and_refuses_an_unknown_group(
    live_server: Any,
    alice: Any,
    team_a: Any,
    team_b: Any,
    operator: Any,
    config_file: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    training = QuotaGroupFactory(name="training")
    inference = QuotaGroupFactory(name="inference")
    mine = QuotaFactory(group=training, tenant=team_a, name="team-a")
    theirs = QuotaFactory(group=training, tenant=team_b, name="team-b")
    elsewhere = QuotaFactory(group=inference, tenant=team_b, name="team-b-inf")
    now = timezone.now().replace(microsecond=0)
    soon = _notice(mine, theirs, "train-0", 11, deadline=now + timedelta(minutes=1))
    later = _notice(elsewhere, None, "serve-0", 12, deadline=now + timedelta(minutes=9))
    closed = _notice(
        mine, theirs, "train-old", 13, state=ReclaimNoticeState.EXECUTED, closed_at=now,
        noticed_at=now - timedelta(minutes=10), deadline=now - timedelta(minutes=5),
    )  # fmt: skip

    cli.save_config(live_server.url, issue_token(operator, name="cli").raw)
    code, out, err = run(capsys, "reclaim-notices", "list", "--json")
    assert (code, err) == (0, "")
    assert [row["id"] for row in json.loads(out)] == [soon.pk, later.pk, closed.pk]

    code, out, _ = run(capsys, "reclaim-notices", "list", "--state", "live", "--group", "inference")
    assert code == 0
    header, row, *rest = out.splitlines()
    assert header.split()[:5] == ["ID", "GROUP", "WORKLOAD", "KIND", "OWNER"]
    assert row.split()[:8] == [
        str(later.pk), "inference", "serve-0", "job_pod", "alice", "team-b-inf", "-", "noticed",
    ]  # fmt: skip
    assert rest == []

    code, out, _ = run(capsys, "reclaim-notices", "list", "--group", str(training.pk), "--json")
    assert (code, [r["id"] for r in json.loads(out)]) == (0, [soon.pk, closed.pk])

    code, out, err = run(capsys, "reclaim-notices", "list", "--group", "nowhere")
    assert code == cli.EXIT_REFUSED
    assert "group: Unknown group 'nowhere'." in err

    cli.save_config(live_server.url, issue_token(alice, name="cli").raw)
    code, out, _ = run(capsys, "reclaim-notices", "list", "--state", "closed", "--json")
    assert (code, [r["id"] for r in json.loads(out)]) == (0, [closed.pk])
    code, out, _ = run(capsys, "reclaim-notices", "list", "--json")
    assert (code, [r["id"] for r in json.loads(out)]) == (0, [soon.pk, closed.pk])
    code, _, err = run(capsys, "reclaim-notices", "list", "--group", "inference")
    assert code == cli.EXIT_REFUSED  # team-a holds no quota there: unknown to alice
    assert "group" in err
