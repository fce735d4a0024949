"""The `tessera` CLI for fairness over time (issue 17): loans, budgets and a quota's fairness report,
against a live server with real tokens."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal import cli
from portal.choices import MembershipRole
from portal.services import issue_token
from portal.tests.factories import MembershipFactory, TenantFactory, UserFactory
from quotas.models import LoanState, QuotaLoan
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory
from tests.api.test_cli import config_file, run  # noqa: F401  (the fixture and the runner)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_loan_asked_approved_and_a_budget_topped_up_through_the_cli(
    live_server: Any,
    alice: Any,
    team_a: Any,
    operator: Any,
    config_file: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = QuotaGroupFactory(name="training")
    mine = QuotaFactory(group=group, tenant=team_a, gpu_max_gpu_milli=4000)
    lab = QuotaFactory(
        group=group, tenant=TenantFactory(slug="lab"), gpu_min_gpu_milli=4000,
        gpu_max_gpu_milli=4000,
    )  # fmt: skip
    lea = UserFactory(username="lea")
    MembershipFactory(user=lea, tenant=lab.tenant, role=MembershipRole.TENANT_ADMIN)
    start = timezone.now().replace(microsecond=0)
    end = start + timedelta(days=2)

    cli.save_config(live_server.url, issue_token(alice, name="cli").raw)
    code, out, err = run(
        capsys, "loan", "request", "--borrower", str(mine.pk), "--lender", str(lab.pk),
        "--gpus", "2", "--starts-at", start.isoformat(), "--ends-at", end.isoformat(), "--json",
    )  # fmt: skip
    assert (code, err) == (0, "")
    loan_id = json.loads(out)["id"]
    code, _, err = run(capsys, "loan", "approve", str(loan_id))  # alice lends nothing
    assert code == cli.EXIT_AUTH  # 403: the CLI says so with its auth exit code
    assert "Only a team admin of the lending team, or an operator, decides a loan." in err

    cli.save_config(live_server.url, issue_token(lea, name="cli").raw)
    code, out, _ = run(capsys, "loan", "approve", str(loan_id), "--note", "ok", "--json")
    assert (code, json.loads(out)["state"], json.loads(out)["active"]) == (0, "approved", True)
    assert QuotaLoan.objects.get(pk=loan_id).state == LoanState.APPROVED

    cli.save_config(live_server.url, issue_token(operator, name="cli").raw)
    code, out, _ = run(
        capsys, "budget", "add", "--quota", str(mine.pk), "--gpu-hours", "40", "--json"
    )
    budget_id = json.loads(out)["id"]
    code, out, _ = run(
        capsys, "budget", "top-up", str(budget_id), "--gpu-hours", "10", "--reason", "deadline",
        "--json",
    )  # fmt: skip
    assert (code, json.loads(out)["limit_with_top_ups"]) == (0, 50.0)
    code, out, _ = run(capsys, "quota", "fairness", str(mine.pk))
    assert code == 0
    first, second = out.splitlines()[:2]
    assert first == "Decayed fair share is off for this quota's group."
    assert second.startswith(
        f"budget {budget_id}: 0.0 of 50.0 GPU-hours used this week (since Mon "
    )
    assert second.endswith(
        "(0 %, all GPU models); at 100 % new borrowing stops, work within min still starts."
    )
    loan_row = out.splitlines()[-1].split()
    assert loan_row[:4] == [str(loan_id), "lab", "team-a", "2"]
    assert loan_row[-2:] == ["approved", "yes"]
