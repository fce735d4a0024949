"""The `tessera` CLI on the demo data `make run` seeds, as a new user meets it (issue 38 #14): the README's
example runs as written, an ambiguous choice lists its candidates and the flag, the README says who is who."""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from portal import cli, demo
from portal.models import Tenant
from portal.services import issue_token
from quotas.models import Quota

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config.json"
    monkeypatch.setenv("TESSERA_CONFIG", str(path))
    monkeypatch.delenv("TESSERA_URL", raising=False)
    monkeypatch.delenv("TESSERA_TOKEN", raising=False)
    return path


@pytest.fixture
def demo_settings(settings: Any) -> Any:
    settings.TESSERA_BACKEND = "simulated"
    settings.TESSERA_SIM_INVENTORY = "demo"
    return settings


def seed_teams_and_quotas() -> None:
    """The part of the demo seed the CLI's choices depend on: teams, users, the cluster, the quotas."""
    from portal import demo as portal_demo
    from quotas import demo as quotas_demo
    from scheduling import demo as scheduling_demo

    for module in (portal_demo, scheduling_demo, quotas_demo):
        module.seed(io.StringIO())


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def login_as(username: str, live_server: Any) -> None:
    user = get_user_model().objects.get(username=username)
    cli.save_config(live_server.url, issue_token(user, name="cli").raw)


def quotas_of(slug: str) -> list[Quota]:
    return list(Quota.objects.filter(tenant__slug=slug).select_related("group").order_by("pk"))


SUBMIT = ("job", "submit", "train", "--pods", "1", "--cpu", "2", "--memory", "8Gi")


@pytest.mark.django_db(transaction=True)
def test_a_job_without_quota_on_a_team_with_two_lists_both_with_ids_and_the_flag(
    demo_settings: Any, live_server: Any, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_teams_and_quotas()
    training, interactive = sorted(
        quotas_of("ml-research"), key=lambda q: q.group.name != "training"
    )
    login_as("alice", live_server)
    code, out, err = run(capsys, *SUBMIT)
    assert (code, out) == (cli.EXIT_REFUSED, "")
    for quota in (training, interactive):
        assert f"{quota.pk} ({quota.group.name})" in err
    assert "  quota (--quota): " in err


@pytest.mark.django_db(transaction=True)
def test_the_api_names_each_quota_of_an_ambiguous_team(demo_settings: Any, client: Any) -> None:
    seed_teams_and_quotas()
    client.force_login(get_user_model().objects.get(username="bob"))
    response = client.post(
        "/api/v1/jobs/",
        {"name": "train", "pods": 1, "member": {"cpu_milli": 1000, "memory_mib": 1024}},
        content_type="application/json",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    expected = ", ".join(f"{q.pk} ({q.group.name})" for q in quotas_of("ml-research"))
    assert error["message"] == (
        f"Team ml-research has 2 quotas; name the one to charge: {expected}."
    )
    assert error["fields"] == {"quota": [f"Required: one of {expected}."]}


@pytest.mark.django_db(transaction=True)
def test_quota_flag_takes_the_pool_name(
    demo_settings: Any, live_server: Any, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_teams_and_quotas()
    login_as("alice", live_server)
    code, out, err = run(capsys, *SUBMIT, "--quota", "interactive", "--json")
    assert (code, err) == (0, "")
    assert (
        json.loads(out)["quota"]
        == Quota.objects.get(tenant__slug="ml-research", group__name="interactive").pk
    )


@pytest.mark.django_db(transaction=True)
def test_an_operator_naming_a_pool_every_team_has_gets_each_quota_and_the_flags(
    demo_settings: Any, live_server: Any, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_teams_and_quotas()
    login_as("ops", live_server)
    code, out, err = run(capsys, *SUBMIT, "--quota", "training")
    assert (code, out) == (cli.EXIT_USAGE, "")
    for quota in Quota.objects.filter(group__name="training").select_related("tenant"):
        assert f"{quota.pk} ({quota.tenant.slug})" in err
    assert "--tenant" in err
    # with the team named, the pool name is enough
    code, out, err = run(capsys, *SUBMIT, "--quota", "training", "--tenant", "vision", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["tenant"] == "vision"
    # an unknown pool lists the ones there are
    code, out, err = run(capsys, *SUBMIT, "--quota", "gpus", "--tenant", "vision")
    assert code == cli.EXIT_USAGE
    assert "interactive" in err
    assert "training" in err


@pytest.mark.django_db(transaction=True)
def test_a_team_choice_an_operator_must_make_lists_the_teams_and_the_flag(
    demo_settings: Any, live_server: Any, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_teams_and_quotas()
    login_as("ops", live_server)
    quota = Quota.objects.filter(tenant__slug="vision").first()
    assert quota is not None
    code, out, err = run(capsys, *SUBMIT, "--quota", str(quota.pk))
    assert code == cli.EXIT_REFUSED
    assert "  tenant (--tenant): " in err
    for slug in Tenant.objects.values_list("slug", flat=True):
        assert slug in err


@pytest.mark.django_db(transaction=True)
def test_job_list_shows_the_teams_jobs_filtered_like_the_other_lists(
    demo_settings: Any, live_server: Any, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scheduling.models import Gang

    seed_teams_and_quotas()
    login_as("alice", live_server)
    for name in ("first", "second"):
        code, _, err = run(capsys, "job", "submit", name, *SUBMIT[3:], "--quota", "training")
        assert (code, err) == (0, "")
    second = Gang.objects.get(name="second")
    run(capsys, "job", "cancel", str(second.pk))
    code, out, err = run(capsys, "job", "list")
    assert (code, err) == (0, "")
    header, *rows = out.splitlines()
    assert header.split()[:5] == ["ID", "NAME", "TENANT", "OWNER", "STATE"]
    assert sorted(row.split()[1] for row in rows) == ["first", "second"]
    code, out, _ = run(capsys, "job", "list", "--state", "cancelled", "--json")
    assert [job["name"] for job in json.loads(out)] == ["second"]
    code, out, _ = run(capsys, "job", "list", "--tenant", "vision")
    assert (code, out) == (0, "(none)\n")


def readme_table(heading: str) -> list[list[str]]:
    """The body rows of the first Markdown table after `heading` in the README, as stripped cells."""
    lines = README.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows: list[list[str]] = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("`") for cell in line.strip().strip("|").split("|")])
    return rows[2:]  # without the header and the |---| line


def test_the_readme_says_who_is_in_which_demo_team_as_the_seed_does() -> None:
    names = dict(demo.TENANTS)
    expected = [
        [
            username,
            f"{slug} ({names[slug]})" if slug else "none (sees every team)",
            "platform operator" if operator else str(role.label).lower(),
        ]
        for username, slug, role, operator in demo.USERS
    ]
    assert readme_table("### Demo users") == expected


def readme_cli_example() -> list[str]:
    """The commands of the README's CLI example (the block after "### The CLI on the demo")."""
    section = README.split("### The CLI on the demo", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    return [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines() if line]


@pytest.mark.django_db(transaction=True)
def test_the_readme_cli_example_runs_as_written_on_the_demo(
    demo_settings: Any,
    live_server: Any,
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    call_command("seed_demo", stdout=io.StringIO())
    commands = readme_cli_example()
    login, *rest = commands
    assert login.startswith("tessera login --url http://127.0.0.1:8000")
    alice = get_user_model().objects.get(username="alice")
    raw = issue_token(alice, name="laptop").raw
    monkeypatch.setattr(
        "sys.stdin",
        type("S", (), {"isatty": lambda self: False, "readline": lambda self: raw + "\n"})(),
    )
    argv = shlex.split(login)[1:]
    argv[argv.index("--url") + 1] = live_server.url
    code, out, err = run(capsys, *argv)
    assert (code, err) == (0, ""), login
    assert "as alice" in out
    assert len(rest) >= 4
    for command in rest:
        assert command.startswith("tessera ")
        code, out, err = run(capsys, *shlex.split(command)[1:])
        assert (code, err) == (0, ""), command
        assert out, command
