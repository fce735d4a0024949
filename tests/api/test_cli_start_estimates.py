"""`tessera job eta` against a live server: the waiting pod's range and reason (issue 20)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from portal import cli
from portal.services import issue_token
from scheduling import services
from scheduling.models import Gang
from scheduling.tests.test_start_estimates import one_busy_gpu

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("XDG_CONFIG_HOME", "TESSERA_CONFIG", "TESSERA_URL", "TESSERA_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home" / ".config" / "tessera" / "config.json"


def test_job_eta_prints_when_the_waiting_pod_is_likely_to_start_and_why(
    live_server: Any, alice: Any, team_a: Any, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quota, _, _ = one_busy_gpu(team_a)
    cli.save_config(live_server.url, issue_token(alice, name="cli").raw)
    argv = ["job", "submit", "train", "--pods", "1", "--cpu-milli", "1000", "--memory-mib", "1024"]
    assert cli.main([*argv, "--gpus-per-pod", "1", "--gpu-milli", "1000", "--json"]) == 0
    capsys.readouterr()
    gang = Gang.objects.get()
    services.run_cycle(quota.group_id)
    assert cli.main(["job", "eta", str(gang.pk)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["WORKLOAD", "STATE", "POSITION", "SUMMARY", "REASON"]
    assert row.split()[1:3] == ["pending", "1"]
    assert "likely in 13–37 min" in row
    assert "0 ahead in the queue; " in row
    assert cli.main(["job", "eta", str(gang.pk), "--json"]) == 0
    (estimate,) = json.loads(capsys.readouterr().out)
    assert (estimate["waiting"], estimate["summary"]) == (True, "likely in 13–37 min")
