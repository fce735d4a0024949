"""Issue 22: a bill that adds up. On a fixed month every GPU's physical cost is split into the teams'
shares, platform overhead, idle and unallocated, allocation-based and usage-based side by side, and
the parts add up to the physical cost to the cent (largest-remainder rounding)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import time_machine
from django.test import Client

from scheduling.models import Gpu, Node
from scheduling.telemetry.bill import IDLE, OVERHEAD, UNALLOCATED, largest_remainder
from scheduling.telemetry.billing import monthly_bill
from scheduling.telemetry.models import QuotaSample, Resolution

NOV = datetime(2026, 11, 1, tzinfo=UTC)
AFTER = datetime(2026, 12, 2, tzinfo=UTC)
D = Decimal


def test_largest_remainder_hands_the_missing_cents_to_the_largest_remainders():
    thirds = {"a": Fraction(10, 3), "b": Fraction(10, 3), "c": Fraction(10, 3)}
    assert largest_remainder(D(10), thirds) == {"a": D("3.34"), "b": D("3.33"), "c": D("3.33")}
    assert largest_remainder(D("1.005"), {"x": D("0.5025"), "y": D("0.5025")}) == {
        "x": D("0.51"),
        "y": D("0.50"),
    }


def test_parts_that_do_not_add_up_are_refused():
    with pytest.raises(ValueError, match="do not add up"):
        largest_remainder(D(10), {"a": D(3)})


@pytest.fixture
def november(telemetry_cluster: Any, settings: Any) -> Any:
    """4 A100 cards (n1, n2) all November (720 h = 2880 GPU-hours) at 2.4567 a GPU-hour; hour rows:
    team-a held 333.333 GPU-hours and used 116.667, team-b held 166.667 and used 150."""
    settings.TESSERA_GPU_HOUR_PRICES = "A100=2.4567,default=1.0"
    settings.TESSERA_CHARGEBACK_CURRENCY = "EUR"
    Node.objects.update(created_at=NOV - timedelta(days=3))
    qa, qb = telemetry_cluster.quotas["team-a"], telemetry_cluster.quotas["team-b"]
    rows = [
        (qa, NOV + timedelta(hours=5), 12_000_000, 4_000_000),
        (qa, NOV + timedelta(days=20), 8_000_000, 3_000_000),
        (qb, NOV + timedelta(days=9), 10_000_000, 9_000_000),
        (qb, NOV - timedelta(hours=1), 99_000_000, 0),  # October: not billed
    ]
    for quota, ts, allocated, used in rows:
        QuotaSample.objects.create(
            resolution=Resolution.HOUR, ts=ts, minutes=60, group=quota.group, quota=quota,
            tenant=quota.tenant, gpu_model="A100", allocated_milli=allocated, used_milli=used,
        )  # fmt: skip
    return telemetry_cluster


def charges(bill: Any) -> dict[str, tuple[Decimal, Decimal]]:
    return {line.part: (line.allocation_charge, line.usage_charge) for line in bill.lines}


@pytest.mark.django_db
def test_the_bill_of_a_fixed_month_adds_up_to_the_physical_cost_to_the_cent(november):
    bill = monthly_bill("2026-11", AFTER)

    # 2880 GPU-hours × 2.4567 = 7075.296 → 7075.30
    assert (bill.period, bill.currency, bill.physical_cost) == ("2026-11", "EUR", D("7075.30"))
    assert charges(bill) == {
        # exact parts: allocation 818.90 + 409.45 + 5846.946; usage 286.615 + 368.505 + 573.23 +
        # 5846.946. Rounded: the missing cent of each basis goes to the largest remainder
        # (unallocated, .006), then on usage the .005 tie between the teams to team-a (by name)
        "team-a": (D("818.90"), D("286.62")),
        "team-b": (D("409.45"), D("368.50")),
        OVERHEAD: (D("0.00"), D("0.00")),
        IDLE: (D("0.00"), D("573.23")),
        UNALLOCATED: (D("5846.95"), D("5846.95")),
    }
    assert bill.total("allocation") == bill.physical_cost == bill.total("usage")
    hours = {line.part: line.allocated_gpu_hours for line in bill.lines}
    assert hours["team-a"] == Fraction(1000, 3)
    assert hours[UNALLOCATED] == 2380


@pytest.mark.django_db
def test_platform_teams_are_billed_as_overhead(november, settings):
    settings.TESSERA_CHARGEBACK_PLATFORM_TEAMS = ["team-b"]
    bill = monthly_bill("2026-11", AFTER)
    # the usage tie at .005 is now between team-a and "(platform overhead)": the name decides
    assert charges(bill) == {
        "team-a": (D("818.90"), D("286.61")),
        OVERHEAD: (D("409.45"), D("368.51")),
        IDLE: (D("0.00"), D("573.23")),
        UNALLOCATED: (D("5846.95"), D("5846.95")),
    }
    assert bill.total("allocation") == bill.total("usage") == D("7075.30")


@pytest.mark.django_db
def test_the_api_and_csv_give_operators_the_whole_bill_and_teams_their_lines(
    november, operator, alice
):
    ops = Client()
    ops.force_login(operator)
    body = ops.get("/api/v1/usage/bill/?month=2026-11").json()
    assert body["physical_cost"] == "7075.30"
    assert sum(D(line["allocation_charge"]) for line in body["lines"]) == D("7075.30")
    assert sum(D(line["usage_charge"]) for line in body["lines"]) == D("7075.30")

    text = ops.get("/api/v1/usage/bill.csv?month=2026-11").content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["part"], r["allocation_charge"], r["usage_charge"]) for r in rows] == [
        ("team-a", "818.90", "286.62"),
        ("team-b", "409.45", "368.50"),
        (OVERHEAD, "0.00", "0.00"),
        (IDLE, "0.00", "573.23"),
        (UNALLOCATED, "5846.95", "5846.95"),
    ]
    assert {r["currency"] for r in rows} == {"EUR"}

    member = Client()
    member.force_login(alice)  # a member of team-a
    mine = member.get("/api/v1/usage/bill/?month=2026-11").json()
    assert mine["physical_cost"] is None
    assert [(x["part"], x["allocation_charge"], x["usage_charge"]) for x in mine["lines"]] == [
        ("team-a", "818.90", "286.62")
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("month", ["2026-13", "11-2026", "1999-12", "x" * 50, "2026-1"])
def test_a_bad_month_is_a_400_naming_the_field(operator, month):
    client = Client()
    client.force_login(operator)
    response = client.get("/api/v1/usage/bill/", {"month": month})
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["month"]


@pytest.mark.django_db
def test_without_a_month_the_bill_is_the_current_months(november, operator):
    client = Client()
    client.force_login(operator)
    with time_machine.travel(datetime(2026, 11, 30, 23, 0, tzinfo=UTC), tick=False):
        body = client.get("/api/v1/usage/bill/").json()
    # 4 cards × (29 days + 23 hours) = 2876 GPU-hours × 2.4567 = 7065.4692
    assert (body["month"], body["physical_cost"]) == ("2026-11", "7065.47")


@pytest.mark.django_db
def test_a_formula_in_a_gpu_model_is_neutralised_in_the_bill_csv(november, operator):
    Gpu.objects.update(model="=A100")
    QuotaSample.objects.update(gpu_model="=A100")
    ops = Client()
    ops.force_login(operator)
    text = ops.get("/api/v1/usage/bill.csv?month=2026-11").content.decode()
    assert {r["gpu_model"] for r in csv.DictReader(io.StringIO(text))} == {"'=A100"}
