"""Whole numbers from user input: ASCII digits only, within a database integer's range."""

import pytest

from portal import numbers
from portal.numbers import BIGINT_MAX, counted, parse_int


@pytest.mark.parametrize(
    ("_case", "text", "expected"),
    [
        ("plain", "42", 42),
        ("negative", "-7", -7),
        ("spaces", " 3 ", 3),
        ("superscript one passes isdigit but is no number", "¹", None),
        ("arabic-indic digits", "٣", None),
        ("beyond bigint", str(BIGINT_MAX + 1), None),
        ("bigint max", str(BIGINT_MAX), BIGINT_MAX),
        ("empty", "", None),
        ("not text", 5, None),
        ("float", "1.5", None),
    ],
)
def test_parse_int(_case, text, expected):
    assert parse_int(text) == expected


def test_parse_int_bounds():
    assert parse_int("0", minimum=1) is None
    assert parse_int("2881", maximum=2880) is None
    assert parse_int("2880", maximum=2880) == 2880


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["%C2%B9", "99999999999999999999"])
def test_integer_filter_refuses_non_numbers_with_400(api_as, operator, value):
    response = api_as(operator).get(f"/api/v1/quotas/?group={value}")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "group": ["Use whole numbers (comma-separated for several)."]
    }


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
def test_amount_typed_in_peoples_units_converts_once_to_the_exact_integer(text, unit, base):
    assert numbers.to_base(text, unit) == base


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
def test_amount_that_is_not_a_plain_bounded_number_is_refused_with_the_reason(text, unit, reason):
    maximum = 100 if unit == "percent" else 10**6
    with pytest.raises(numbers.UnitError, match=reason):
        numbers.to_base(text, unit, maximum=maximum)


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
def test_exact_integer_is_shown_in_peoples_units(base, unit, shown):
    assert numbers.human(base, unit) == shown
    assert numbers.to_base(numbers.from_base(base, unit), unit) == base


@pytest.mark.django_db
@pytest.mark.parametrize("value", [",", " , ", "%2C%2C"])
def test_a_filter_of_only_commas_is_no_filter_not_a_500(api_as, operator, value):
    # found by the schemathesis run: ?healthy=, left no values and indexed an empty list
    response = api_as(operator).get(f"/api/v1/nodes/?healthy={value}")
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("number", "text"),
    [(1, "1 GPU"), (1.0, "1 GPU"), (0, "0 GPUs"), (0.75, "0.75 GPUs"), (2, "2 GPUs"), (None, "—")],
)
def test_counted_says_one_gpu_and_otherwise_gpus(number: object, text: str) -> None:
    assert counted(number, "GPU") == text
