"""Figure builders: plain data in, Plotly dicts out; no database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from portal import charts

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


@dataclass
class P:
    ts: datetime
    allocation_cards_percent: float | None = None
    allocation_milli_percent: float | None = None
    utilization_percent: float | None = None
    pending: float = 0.0
    wait_p50_seconds: float | None = None
    wait_p95_seconds: float | None = None


@dataclass
class T:
    ts: datetime
    allocated: float
    used: float
    idle: float
    min: float
    max: float
    runtime: float
    borrowed: float

    @property
    def utilization_percent(self) -> float | None:
        return round(self.used / self.allocated * 100, 2) if self.allocated else None


def test_tenant_colours_are_stable_and_from_the_palette():
    assert charts.tenant_color("team-a") == charts.tenant_color("team-a")
    assert charts.tenant_color("team-a") in charts.PALETTE
    assert charts.pool_color("a100") in charts.PALETTE


def test_allocation_figure_has_three_lines_per_pool_in_percent():
    points = [P(T0, 50.0, 25.0, 10.0), P(T0 + timedelta(minutes=1), 100.0, 75.5, 60.0)]
    fig = charts.allocation_figure({"b": points, "a": points[:1]})
    names = [t["name"] for t in fig["data"]]
    assert names == [
        "a allocation (compute)",
        "a allocation (cards)",
        "a SM utilization",
        "b allocation (compute)",
        "b allocation (cards)",
        "b SM utilization",
    ]
    assert fig["data"][3]["y"] == [25.0, 75.5]
    assert fig["data"][4]["y"] == [50.0, 100.0]
    assert fig["data"][5]["y"] == [10.0, 60.0]
    assert fig["data"][3]["x"] == ["2026-11-02T10:00:00+00:00", "2026-11-02T10:01:00+00:00"]
    assert fig["layout"]["title"]["text"] == "GPU allocation and utilization per pool"
    assert fig["layout"]["yaxis"]["ticksuffix"] == "%"
    assert fig["data"][0]["line"]["color"] == charts.pool_color("a")


def test_pending_and_wait_figures_convert_seconds_to_minutes_and_keep_gaps():
    points = [P(T0, pending=2.0, wait_p50_seconds=90.0, wait_p95_seconds=600.0), P(T0, pending=0.5)]
    pending = charts.pending_figure({"a100": points})
    assert pending["data"][0]["y"] == [2.0, 0.5]
    assert pending["data"][0]["stackgroup"] == "pending"
    waits = charts.wait_figure({"a100": points})
    assert [t["name"] for t in waits["data"]] == ["a100 p50", "a100 p95"]
    assert waits["data"][0]["y"] == [1.5, None]
    assert waits["data"][1]["y"] == [10.0, None]
    assert waits["layout"]["yaxis"]["title"]["text"] == "minutes"


def test_tenant_figures():
    points = [T(T0, 2.0, 0.5, 1.0, 1.0, 4.0, 2.5, 1.0)]
    quota = charts.tenant_quota_figure("team-a", points)
    assert [(t["name"], t["y"]) for t in quota["data"]] == [
        ("allocated", [2.0]),
        ("borrowed", [1.0]),
        ("min", [1.0]),
        ("max", [4.0]),
        ("runtime share", [2.5]),
    ]
    assert quota["data"][0]["line"]["color"] == charts.tenant_color("team-a")
    util = charts.tenant_utilization_figure("team-a", points)
    assert [(t["name"], t["y"]) for t in util["data"]] == [
        ("used (SM-weighted)", [0.5]),
        ("idle allocation", [1.0]),
        ("utilization", [25.0]),
    ]
    assert util["layout"]["barmode"] == "stack"


def test_wasting_figure_lists_the_worst_at_the_top():
    @dataclass
    class W:
        name: str
        idle_gpu_hours: float
        allocated_gpu_hours: float
        utilization_percent: float | None

    fig = charts.wasting_figure("team-a", [W("cs-1", 9.5, 10.0, 2.0), W("cs-2", 3.0, 8.0, 40.0)])
    assert fig["data"][0]["y"] == ["cs-2", "cs-1"]
    assert fig["data"][0]["x"] == [3.0, 9.5]
    assert fig["data"][0]["customdata"] == [[8.0, 40.0], [10.0, 2.0]]


def test_fragmentation_heatmap_and_fit_bars():
    fig = charts.fragmentation_heatmap(
        ["n1", "n2"], 2, [[500, 0], [1000, None]], title="Free compute", unit="milli", maximum=1000
    )
    trace = fig["data"][0]
    assert trace["type"] == "heatmap"
    assert trace["x"] == ["GPU 0", "GPU 1"]
    assert trace["y"] == ["n1", "n2"]
    assert trace["z"] == [[500, 0], [1000, None]]
    assert (trace["zmin"], trace["zmax"]) == (0, 1000)
    fits = charts.slice_fit_figure("25% / 20 GiB", {"n1": 2, "n3": 5, "n2": 2}, top=2)
    assert fits["data"][0]["x"] == ["n3", "n1"]
    assert fits["data"][0]["y"] == [5, 2]
    assert fits["layout"]["title"]["text"] == "9 more “25% / 20 GiB” fit — where (top 2 nodes)"


def test_savings_figure():
    @dataclass
    class S:
        ts: datetime
        cards_unsliced: float
        cards_occupied: float

    fig = charts.savings_figure([S(T0, 8.0, 2.0)])
    assert [(t["name"], t["y"]) for t in fig["data"]] == [
        ("cards needed without slicing", [8.0]),
        ("cards occupied by slices", [2.0]),
    ]


def test_chargeback_figure_stacks_tenants_per_month():
    @dataclass
    class R:
        month: str
        tenant_slug: str
        allocated_gpu_hours: float
        used_gpu_hours: float
        cost: Decimal

    rows = [
        R("2026-10", "team-b", 5.0, 5.0, Decimal("20.00")),
        R("2026-11", "team-a", 10.0, 4.0, Decimal("25.00")),
        R("2026-11", "team-a", 2.0, 1.0, Decimal("5.00")),
    ]
    fig = charts.chargeback_figure(rows)
    assert [(t["name"], t["x"], t["y"]) for t in fig["data"]] == [
        ("team-a", ["2026-10", "2026-11"], [0.0, 30.0]),
        ("team-b", ["2026-10", "2026-11"], [20.0, 0.0]),
    ]
    assert fig["data"][0]["customdata"] == [[0, 0], [12.0, 5.0]]
    assert fig["layout"]["barmode"] == "stack"
    assert fig["layout"]["yaxis"]["title"]["text"] == "charge (USD)"


def test_wasting_figure_says_so_when_nothing_was_idle():
    fig = charts.wasting_figure("team-a", [])
    assert fig["data"][0]["x"] == []
    assert (
        fig["layout"]["annotations"][0]["text"] == "No codespace held idle GPU time in this range"
    )
