"""Trace-replay tests without the shared traces: skipped naming what is missing, or failed in CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduling.tests.traces import require_traces


def test_missing_traces_skip_naming_the_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TESSERA_REQUIRE_TRACES", raising=False)
    present = tmp_path / "nodes.csv"
    present.write_text("sn\n")
    with pytest.raises(pytest.skip.Exception, match=r"missing: .*pods\.csv$"):
        require_traces(present, tmp_path / "pods.csv")


def test_missing_traces_fail_when_ci_requires_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TESSERA_REQUIRE_TRACES", "1")
    with pytest.raises(pytest.fail.Exception, match=r"\.\./shared.*missing: .*pods\.csv"):
        require_traces(tmp_path / "pods.csv")


def test_present_traces_let_the_test_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_REQUIRE_TRACES", "1")
    present = tmp_path / "nodes.csv"
    present.write_text("sn\n")
    require_traces(present)  # returns: neither skip nor fail raised
