"""The `tessera` CLI against a live server with a real token (issue 7)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from portal import cli
from portal.models import ApiToken
from portal.services import issue_token, revoke_token

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home" / ".config" / "tessera" / "config.json"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("TESSERA_CONFIG", raising=False)
    monkeypatch.delenv("TESSERA_URL", raising=False)
    monkeypatch.delenv("TESSERA_TOKEN", raising=False)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_login_checks_the_token_and_saves_it_0600(
    live_server: Any, alice: Any, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = issue_token(alice, name="laptop").raw
    code, out, err = run(capsys, "login", "--url", live_server.url, "--token", raw)
    assert (code, err) == (0, "")
    assert out == (
        f"Logged in to {live_server.url} as alice (tenants: team-a); saved to {config_file}\n"
    )
    assert json.loads(config_file.read_text()) == {"url": live_server.url, "token": raw}
    assert stat.S_IMODE(os.stat(config_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(config_file.parent).st_mode) == 0o700


def test_login_reads_the_token_from_stdin(
    live_server: Any,
    alice: Any,
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = issue_token(alice, name="laptop").raw
    monkeypatch.setattr(
        "sys.stdin",
        type("S", (), {"isatty": lambda self: False, "readline": lambda self: raw + "\n"})(),
    )
    code, _, _ = run(capsys, "login", "--url", live_server.url)
    assert code == 0
    assert json.loads(config_file.read_text())["token"] == raw


def test_login_with_a_revoked_token_fails_with_the_api_message_and_saves_nothing(
    live_server: Any, alice: Any, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    issued = issue_token(alice, name="old")
    revoke_token(alice, issued.token.pk)
    code, out, err = run(capsys, "login", "--url", live_server.url, "--token", issued.raw)
    assert code == cli.EXIT_AUTH
    assert out == ""
    assert err == (
        "error: Invalid, expired or revoked token. Run `tessera login` with a valid token. "
        "[authentication_failed]\n"
    )
    assert config_file.exists() is False


def test_commands_without_login_say_how_to_log_in(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "quota", "show")
    assert code == cli.EXIT_AUTH
    assert err.startswith("error: Not logged in: run `tessera login --url <portal URL>`")


def test_unreachable_server_is_a_clear_error(
    config_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli.time, "sleep", lambda seconds: None)
    cli.save_config("http://127.0.0.1:9", "tsr_x_y")
    code, _, err = run(capsys, "codespace", "list")
    assert code == cli.EXIT_SERVER
    assert err == "error: Cannot reach http://127.0.0.1:9: ConnectionError.\n"


def test_not_found_has_its_own_exit_code(
    live_server: Any, alice: Any, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.save_config(live_server.url, issue_token(alice, name="cli").raw)
    code, out, err = run(capsys, "codespace", "show", "999999")
    assert code == cli.EXIT_NOT_FOUND
    assert out == ""
    assert err == "error: Not found. [not_found]\n"


def test_client_posts_carry_an_idempotency_key_and_retry_with_it(
    live_server: Any, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a client whose first attempt is lost on the way back (the server did create the token)
    raw = issue_token(alice, name="cli").raw
    client = cli.Client(live_server.url, raw)
    real_request = client.session.request
    sent_keys: list[str] = []

    def flaky(method: str, url: str, **kwargs: Any) -> Any:
        sent_keys.append(kwargs["headers"]["Idempotency-Key"])
        response = real_request(method, url, **kwargs)
        if len(sent_keys) == 1:
            raise cli.requests.ConnectionError("connection reset")
        return response

    monkeypatch.setattr(client.session, "request", flaky)
    monkeypatch.setattr(cli.time, "sleep", lambda seconds: None)
    # when it posts
    created = client.post("/tokens/", {"name": "made-once"})
    # then it retried with the same key and exactly one token exists
    assert len(sent_keys) == 2
    assert sent_keys[0] == sent_keys[1]
    assert created["name"] == "made-once"
    assert ApiToken.objects.filter(name="made-once").count() == 1


def test_api_field_errors_are_printed_under_the_message(
    live_server: Any, alice: Any, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = cli.Client(live_server.url, issue_token(alice, name="cli").raw)
    with pytest.raises(cli.CliError) as caught:
        client.post("/tokens/", {"name": ""})
    assert caught.value.exit_code == cli.EXIT_REFUSED
    assert caught.value.message == "name: This field may not be blank. [invalid]"
    assert caught.value.fields == {"name": ["This field may not be blank."]}


def test_table_and_object_rendering() -> None:
    rows = [
        {"id": 1, "name": "nb", "state": "running", "gpu": None, "extra": "x"},
        {"id": 12, "name": "train-a", "state": "stopped", "gpu": True},
    ]
    assert cli.render_table(rows, ("id", "name", "state", "gpu", "missing")) == (
        "ID  NAME     STATE    GPU\n1   nb       running  -\n12  train-a  stopped  yes"
    )
    assert cli.render_object({"id": 3, "labels": {"a": 1}}) == 'id      3\nlabels  {"a":1}'


def test_codespace_lifecycle_through_the_cli(
    live_server: Any,
    alice: Any,
    quota_a: Any,
    template: Any,
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from codespaces.models import Codespace

    cli.save_config(live_server.url, issue_token(alice, name="cli").raw)
    # create (JSON), then list and show as tables
    code, out, err = run(
        capsys, "codespace", "create", "nb1", "--template", "pytorch", "--preset", "quarter-h100",
        "--json",
    )  # fmt: skip
    assert (code, err) == (0, "")
    created = json.loads(out)
    assert (created["name"], created["tenant"], created["owner"]) == ("nb1", "team-a", "alice")
    codespace = Codespace.objects.get()
    assert created["id"] == codespace.pk

    code, out, _ = run(capsys, "codespace", "list")
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:5] == ["ID", "NAME", "TENANT", "OWNER", "STATE"]
    assert row.split()[:5] == [str(codespace.pk), "nb1", "team-a", "alice", codespace.state]

    code, out, _ = run(capsys, "codespace", "show", str(codespace.pk))
    assert code == 0
    assert any(line.split() == ["name", "nb1"] for line in out.splitlines())

    # stop, start, delete
    code, out, _ = run(capsys, "codespace", "stop", str(codespace.pk), "--json")
    assert code == 0
    codespace.refresh_from_db()
    assert json.loads(out)["state"] == codespace.state
    assert codespace.state in ("stopping", "stopped")
    code, out, _ = run(capsys, "codespace", "start", str(codespace.pk), "--json")
    assert code == 0
    # the answer is the state the start committed; the placement it triggers runs after the commit
    assert json.loads(out)["state"] == "queued"
    codespace.refresh_from_db()
    assert codespace.state in ("queued", "starting", "running")
    code, out, _ = run(capsys, "codespace", "delete", str(codespace.pk))
    assert (code, out) == (0, f"Codespace {codespace.pk} deleted.\n")
    codespace.refresh_from_db()
    assert codespace.state in ("deleting", "deleted")

    # a refused create prints the API's message and field errors, exit code 1, nothing created
    code, out, err = run(
        capsys,
        "codespace",
        "create",
        "Bad_Name",
        "--template",
        "pytorch",
        "--preset",
        "quarter-h100",
    )
    assert code == cli.EXIT_REFUSED
    assert out == ""
    assert err.startswith("error: ")
    assert "\n  name: " in err
    assert Codespace.objects.count() == 1


def test_job_submit_show_cancel_and_quota_show_through_the_cli(
    live_server: Any,
    alice: Any,
    quota_a: Any,
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from scheduling.models import Gang

    cli.save_config(live_server.url, issue_token(alice, name="cli").raw)
    code, out, err = run(
        capsys, "job", "submit", "train", "--pods", "2", "--cpu-milli", "1000", "--memory-mib", "2048",
        "--json",
    )  # fmt: skip
    assert (code, err) == (0, "")
    job = json.loads(out)
    gang = Gang.objects.get()
    assert (job["id"], job["name"], job["tenant"], job["pods"]) == (gang.pk, "train", "team-a", 2)
    assert job["min_available"] == 2

    code, out, _ = run(capsys, "job", "show", str(gang.pk))
    assert code == 0
    lines = out.splitlines()
    assert any(line.split()[:2] == ["name", "train"] for line in lines)
    member_header = lines.index(next(line for line in lines if line.startswith("ID ")))
    assert lines[member_header].split()[:3] == ["ID", "NAME", "STATE"]
    assert len(lines) - member_header - 1 == 2  # one row per pod

    code, out, _ = run(capsys, "job", "cancel", str(gang.pk), "--json")
    assert code == 0
    gang.refresh_from_db()
    assert json.loads(out)["state"] == gang.state

    code, out, _ = run(capsys, "quota", "show")
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:4] == ["ID", "TENANT", "GROUP_NAME", "NAME"]
    assert row.split()[:2] == [str(quota_a.pk), "team-a"]
    code, out, _ = run(capsys, "quota", "show", "--json")
    assert [q["id"] for q in json.loads(out)] == [quota_a.pk]


def test_job_submit_with_topology_through_the_cli_asks_for_one_domain(
    live_server: Any,
    alice: Any,
    quota_a: Any,
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from scheduling.models import Gang

    cli.save_config(live_server.url, issue_token(alice, name="cli").raw)
    code, out, err = run(
        capsys, "job", "submit", "train", "--pods", "2", "--cpu-milli", "1000", "--memory-mib", "2048",
        "--topology", "rack", "--topology-preferred", "--json",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert (json.loads(out)["topology_level"], json.loads(out)["topology_mode"]) == (
        "rack",
        "preferred",
    )
    assert Gang.objects.values_list("topology_level", "topology_mode").get() == (
        "rack",
        "preferred",
    )
    code, out, err = run(
        capsys, "job", "submit", "other", "--pods", "1", "--cpu-milli", "1000", "--memory-mib", "2048",
        "--topology", "shelf",
    )  # fmt: skip
    assert code == cli.EXIT_REFUSED
    assert "topology_level" in err


def test_deleting_another_users_codespace_through_the_cli_takes_a_reason(
    live_server: Any,
    alice: Any,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from codespaces.models import Codespace
    from codespaces.tests.factories import CodespaceFactory
    from portal.models import OperatorAction

    bobs = CodespaceFactory(
        name="bobs", owner=bob, tenant=team_a, quota=quota_a, template=template, state="stopped"
    )
    # alice administers team-a: she may delete bob's codespace, with a reason
    cli.save_config(live_server.url, issue_token(alice, name="cli").raw)
    code, out, err = run(capsys, "codespace", "delete", str(bobs.pk))
    assert (code, out) == (1, "")
    assert "reason: A reason is required" in err
    assert Codespace.objects.get(pk=bobs.pk).state == "stopped"
    code, out, _ = run(capsys, "codespace", "delete", str(bobs.pk), "--reason", "left the team")
    assert (code, out) == (0, f"Codespace {bobs.pk} deleted.\n")
    assert OperatorAction.objects.get().reason == "left the team"
