"""The `tessera` CLI for polite reclaim: an operator sets a group's notice and a quota's checkpoint
webhook, and a team member reads the reclaim plan, against a live server with real tokens."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal import cli
from portal.services import issue_token
from quotas.models import QuotaGroup, ReclaimNotice
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory
from tests.api.test_cli import config_file, run  # noqa: F401  (the fixture and the runner)

pytestmark = pytest.mark.django_db(transaction=True)


def test_operators_set_polite_reclaim_and_the_team_reads_its_plan_through_the_cli(
    live_server: Any,
    alice: Any,
    team_a: Any,
    team_b: Any,
    operator: Any,
    config_file: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = QuotaGroupFactory(name="training")
    mine = QuotaFactory(group=group, tenant=team_a, name="team-a")
    theirs = QuotaFactory(group=group, tenant=team_b, name="team-b")
    now = timezone.now().replace(microsecond=0)
    notice = ReclaimNotice.objects.create(
        group=group, quota=mine, claimant_quota=theirs, workload_id=5, workload_name="train-0",
        workload_kind="job_pod", owner_username="alice", victim_name="train-0", reason="min back",
        noticed_at=now, deadline=now + timedelta(minutes=5),
    )  # fmt: skip

    cli.save_config(live_server.url, issue_token(operator, name="cli").raw)
    code, out, err = run(
        capsys, "quota", "reclaim-notice", "--group", str(group.pk), "--seconds", "300", "--json"
    )
    assert (code, err, json.loads(out)["reclaim_notice_seconds"]) == (0, "", 300)
    code, out, _ = run(
        capsys, "quota", "reclaim-settings", str(mine.pk), "--webhook", "https://ci.example/ckpt",
        "--json",
    )  # fmt: skip
    assert (code, json.loads(out)["checkpoint_webhook_url"]) == (0, "https://ci.example/ckpt")
    code, _, err = run(
        capsys, "quota", "reclaim-notice", "--group", str(group.pk), "--seconds", "9999"
    )
    assert code != 0
    assert "reclaim_notice_seconds" in err
    assert QuotaGroup.objects.get(pk=group.pk).reclaim_notice_seconds == 300

    cli.save_config(live_server.url, issue_token(alice, name="cli").raw)
    code, out, _ = run(capsys, "quota", "reclaim-notices", str(mine.pk))
    assert code == 0
    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["ID", "WORKLOAD", "KIND", "QUOTA"]
    assert row.split()[:7] == [
        str(notice.pk), "train-0", "job_pod", "team-a", "alice", "team-b", "noticed",
    ]  # fmt: skip
