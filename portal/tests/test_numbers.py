"""Whole numbers from user input: ASCII digits only, within a database integer's range."""

import pytest

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
