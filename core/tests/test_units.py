"""core.units: the units, the MIG profile grammar and the conversion to and from people's units, the one
copy every app and the engine use (issue 39)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from core import units
from core.units import MigProfileError, MigProfileName, parse_mig_profile


# --------------------------------------------------------------------------- the MIG profile grammar
@pytest.mark.parametrize(
    ("name", "compute_slices", "memory_gb", "milli", "memory_mib"),
    [
        ("1g.10gb", 1, 10, 142, 10240),
        ("1g.5gb", 1, 5, 142, 5120),
        ("2g.20gb", 2, 20, 285, 20480),
        ("3g.40gb", 3, 40, 428, 40960),
        ("4g.40gb", 4, 40, 571, 40960),
        ("7g.80gb", 7, 80, 1000, 81920),
        ("7g.141gb", 7, 141, 1000, 144384),
    ],
)
def test_a_mig_profile_name_says_its_compute_slices_and_memory(
    name: str, compute_slices: int, memory_gb: int, milli: int, memory_mib: int
) -> None:
    parsed = parse_mig_profile(name)
    assert parsed == MigProfileName(compute_slices, memory_gb)
    assert units.mig_compute_slices(name) == compute_slices
    assert units.mig_gpu_equivalent_milli(name) == parsed.gpu_equivalent_milli == milli
    assert units.mig_memory_mib(name) == parsed.memory_mib == memory_mib
    assert units.is_mig_profile(name)
    assert units.mig_profile_error(name) is None


def test_seven_one_slice_instances_never_count_as_more_than_one_gpu() -> None:
    assert 7 * units.mig_gpu_equivalent_milli("1g.10gb") <= units.MILLI_PER_GPU


@pytest.mark.parametrize(
    "name",
    [
        "",
        "8g.80gb",  # a card has 7 compute slices
        "0g.10gb",
        "1g.0gb",
        "1g.010gb",
        "1g.1000gb",
        "1G.10GB",
        "1g10gb",
        "1g.10gb+me",  # media extensions are not handed out
        "1c.2g.20gb",  # nor compute-instance splits
        " 1g.10gb",
        "1g.10gb\n",
        "1g.10gb; rm",
        None,
        10,
        ["1g.10gb"],
    ],
)
def test_anything_else_is_refused_with_a_message_that_quotes_it_and_shows_a_valid_name(
    name: Any,
) -> None:
    assert not units.is_mig_profile(name)
    reason = units.mig_profile_error(name)
    assert reason is not None
    assert repr(str(name)[:40]) in reason
    assert "such as 1g.10gb" in reason
    with pytest.raises(
        MigProfileError, match="is not a MIG profile name such as 1g.10gb"
    ) as caught:
        parse_mig_profile(name)
    assert str(caught.value) == reason
    assert isinstance(caught.value, ValueError)  # callers that catch ValueError keep working
    with pytest.raises(MigProfileError):
        units.mig_gpu_equivalent_milli(name)


def test_a_long_wrong_name_is_quoted_only_in_part() -> None:
    reason = units.mig_profile_error("x" * 500)
    assert reason is not None
    assert "x" * 41 not in reason


# --------------------------------------------------------------------------- unit conversions
@pytest.mark.parametrize(
    ("_case", "convert", "value", "expected"),
    [
        ("20 GiB", units.gib_to_mib, 20, 20480),
        ("20480 MiB", units.mib_to_gib, 20480, 20.0),
        ("half a GiB", units.mib_to_gib, 512, 0.5),
        ("25 %", units.percent_to_milli, 25, 250),
        ("250 milli-GPU", units.milli_to_percent, 250, 25.0),
        ("12.5 %", units.milli_to_percent, 125, 12.5),
        ("0.5 cores", units.cores_to_milli, 0.5, 500),
        ("Decimal 4.0 cores", units.cores_to_milli, Decimal("4.0"), 4000),
        ("blank cores", units.cores_to_milli, None, 0),
        ("2500 milli-CPU", units.milli_to_cores, 2500, 2.5),
    ],
)
def test_units_convert_between_peoples_and_scheduler_units(
    _case: str, convert: Any, value: Any, expected: Any
) -> None:
    assert convert(value) == expected


# --------------------------------------------------------------------------- people's units
@pytest.mark.parametrize(
    ("text", "unit", "base"),
    [
        ("2.5", "gpus", 2500),
        ("0,5", "gpus", 500),
        ("1", "cores", 1000),
        ("12", "gib", 12288),
        ("0.977", "gib", 1000),  # 3 decimals of GiB name every MiB exactly
        ("30", "percent", 300),
        ("12.5", "percent", 125),
        (" 80 ", "gib", 81920),
    ],
)
def test_amount_typed_in_peoples_units_converts_once_to_the_exact_integer(
    text: str, unit: str, base: int
) -> None:
    assert units.to_base(text, unit) == base


@pytest.mark.parametrize(
    ("text", "unit", "reason"),
    [
        ("", "gpus", "Enter a number of GPUs"),
        ("-1", "gpus", "Enter a number of GPUs"),
        ("1e3", "gib", "Enter a number of GiB"),
        ("²", "cores", "Enter a number of cores"),
        ("0.0001", "gpus", "at most 3 decimal places"),
        ("12.25", "percent", "at most 1 decimal place"),
        ("101", "percent", "between 0 and 100 %"),
    ],
)
def test_amount_that_is_not_a_plain_bounded_number_is_refused_with_the_reason(
    text: str, unit: str, reason: str
) -> None:
    maximum = 100 if unit == "percent" else 10**6
    with pytest.raises(units.UnitError, match=reason):
        units.to_base(text, unit, maximum=maximum)


@pytest.mark.parametrize(
    ("base", "unit", "shown"),
    [
        (2500, "gpus", "2.5 GPUs"),
        (1000, "gpus", "1 GPU"),
        (0, "cores", "0 cores"),
        (12288, "gib", "12 GiB"),
        (1000, "gib", "0.977 GiB"),
        (300, "percent", "30 %"),
    ],
)
def test_exact_integer_is_shown_in_peoples_units(base: int, unit: str, shown: str) -> None:
    assert units.human(base, unit) == shown
    assert units.to_base(units.from_base(base, unit), unit) == base
