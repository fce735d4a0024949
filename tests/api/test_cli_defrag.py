"""The `tessera defrag` verbs (issue 21): an operator previews a pool's plan, reads it and applies it
against a live server; a member is refused with the auth exit code."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from portal import cli
from portal.services import issue_token
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from scheduling.tests.defrag_scenario import fragmented_pool
from tests.api.test_cli import config_file, run  # noqa: F401  (the fixture and the runner)

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_operator_previews_shows_and_applies_a_plan_with_the_cli(
    live_server: Any,
    operator: Any,
    alice: Any,
    team_a: Any,
    settings: Any,
    config_file: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings.TESSERA_DEFRAG_MIN_RUNTIME_SECONDS = 0
    pool = fragmented_pool(team_a)

    cli.save_config(live_server.url, issue_token(alice, name="cli").raw)
    code, _, err = run(capsys, "defrag", "preview", "--group", str(pool.quota.group_id))
    assert code == cli.EXIT_AUTH
    assert "Only platform operators can plan or apply defragmentation." in err

    cli.save_config(live_server.url, issue_token(operator, name="cli").raw)
    code, out, err = run(capsys, "defrag", "preview", "--group", str(pool.quota.group_id), "--json")
    assert (code, err) == (0, "")
    plan = json.loads(out)
    assert (plan["state"], len(plan["moves"])) == ("previewed", 1)

    code, out, _ = run(capsys, "defrag", "show", str(plan["id"]))
    assert code == 0
    assert out.startswith(f"plan {plan['id']} of training: previewed\n{plan['value']}\n")
    assert plan["moves"][0]["reason"] in out
    assert "Looked at 1 waiting request and 2 running workloads; 2 may move.\n" in out

    code, out, _ = run(capsys, "defrag", "apply", str(plan["id"]))
    assert code == 0
    assert out.startswith(f"plan {plan['id']} of training: applied")
    assert Workload.objects.get(pk=pool.waiting.pk).state in (
        WorkloadState.PLACED,
        WorkloadState.RUNNING,
    )


def test_an_empty_plan_prints_why_the_work_stayed(capsys: pytest.CaptureFixture[str]) -> None:
    plan = {
        "id": 7,
        "group_name": "training",
        "state": "previewed",
        "value": "No move helps: nothing can be freed within the limits.",
        "considered": {
            "summary": "Looked at 1 waiting request and 2 running workloads; none may move.",
            "kept": [{"reason": "it is not preemptible", "count": 2}],
            "planner": [{"reason": "a blocked request had no node it could use", "count": 1}],
        },
        "moves": [],
    }
    cli.emit_defrag_plan(argparse.Namespace(json=False), plan)
    assert capsys.readouterr().out.splitlines() == [
        "plan 7 of training: previewed",
        "No move helps: nothing can be freed within the limits.",
        "Looked at 1 waiting request and 2 running workloads; none may move.",
        "  kept in place: it is not preemptible (2 workload(s))",
        "  held the planner back: a blocked request had no node it could use (1x)",
        "(no moves)",
    ]
