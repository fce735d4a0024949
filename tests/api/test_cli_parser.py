"""The `tessera` command line itself, without a server: every flag documented, human units (issue 38 #14)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from portal import cli


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("tessera",)
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the CLI, with the words that reach it (`tessera job submit`)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*path, name))


def test_every_flag_and_argument_of_every_subcommand_has_help() -> None:
    parsers = list(_parsers(cli.build_parser()))
    assert ("tessera", "job", "list") in {path for path, _ in parsers}
    missing = [
        f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
        for path, parser in parsers
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
        and not (action.help or "").strip()
    ]
    assert missing == []


def test_every_subcommand_has_help() -> None:
    missing = [
        f"{' '.join(path)} {choice.dest}"
        for path, parser in _parsers(cli.build_parser())
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for choice in action._choices_actions
        if not (choice.help or "").strip()
    ]
    assert missing == []


SUBMIT = ("job", "submit", "train", "--pods", "2")


@pytest.mark.parametrize(
    ("flags", "cpu_milli", "memory_mib"),
    [
        (("--cpu", "8", "--memory", "32Gi"), 8000, 32768),
        (("--cpu", "0.5", "--memory", "512Mi"), 500, 512),
        (("--cpu", "1500m", "--memory", "1.5Gi"), 1500, 1536),
        (("--cpu", "2", "--memory", "32G"), 2000, 32 * 10**9 // 2**20),
        (("--cpu-milli", "8000", "--memory-mib", "32768"), 8000, 32768),
    ],
)
def test_job_submit_takes_cpu_and_memory_in_human_units(
    flags: tuple[str, ...], cpu_milli: int, memory_mib: int
) -> None:
    args = cli.build_parser().parse_args([*SUBMIT, *flags])
    assert cli.job_member(args)["cpu_milli"] == cpu_milli
    assert cli.job_member(args)["memory_mib"] == memory_mib


def test_job_submit_takes_gpu_memory_in_human_units() -> None:
    args = cli.build_parser().parse_args(
        [*SUBMIT, "--cpu", "4", "--memory", "16Gi", "--gpus-per-pod", "1", "--gpu-memory", "20Gi"]
    )
    assert cli.job_member(args)["gpu_memory_mib"] == 20480


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--cpu", "8", "--memory", "32Gb"), "--memory"),
        (("--cpu", "8", "--memory", "32768"), "--memory"),
        (("--cpu", "8", "--memory=-1Gi"), "--memory"),
        (("--cpu", "8", "--memory", "0.1Ki"), "--memory"),
        (("--cpu", "eight", "--memory", "32Gi"), "--cpu"),
        (("--cpu", "0", "--memory", "32Gi"), "--cpu"),
        (("--cpu", "8", "--memory", "32Gi", "--gpu-memory", "lots"), "--gpu-memory"),
    ],
)
def test_bad_units_are_a_usage_error_naming_the_flag(
    flags: tuple[str, ...], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args([*SUBMIT, *flags])
    assert exited.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"argument {named}" in err
    assert "e.g." in err


@pytest.mark.parametrize(
    "flags",
    [
        ("--memory", "32Gi"),  # no CPU
        ("--cpu", "8"),  # no memory
        ("--cpu", "8", "--cpu-milli", "8000", "--memory", "32Gi"),  # CPU twice
    ],
)
def test_job_submit_needs_cpu_and_memory_exactly_once(
    flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args([*SUBMIT, *flags])
    assert exited.value.code == cli.EXIT_USAGE
    assert "--cpu" in capsys.readouterr().err
