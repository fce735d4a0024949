"""Plotly figures built from plain data (no database, no request): dicts ready for `Plotly.react`.

Each builder takes plain values (lists of tuples / simple objects with attributes) and returns
`{"data": [...], "layout": {...}}` with a title, axis units and hover text. Tenants keep the same colour
on every chart (`tenant_color`), pools too (`pool_color`). Tested in dashboards/tests/test_charts.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

Figure = dict[str, Any]

PALETTE = (
    "#4f46e5",
    "#0891b2",
    "#16a34a",
    "#ea580c",
    "#db2777",
    "#7c3aed",
    "#ca8a04",
    "#0d9488",
    "#dc2626",
    "#2563eb",
    "#65a30d",
    "#9333ea",
)
QUOTA_COLORS = {"min": "#16a34a", "max": "#dc2626", "runtime": "#ca8a04", "borrowed": "#f97316"}


def _stable_color(key: str) -> str:
    digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
    return PALETTE[int.from_bytes(digest, "big") % len(PALETTE)]


def tenant_color(slug: str) -> str:
    """The colour of a tenant on every chart (stable across pages and processes)."""
    return _stable_color(f"tenant:{slug}")


def pool_color(name: str) -> str:
    """The colour of a pool on every chart."""
    return _stable_color(f"pool:{name}")


def _iso(ts: datetime) -> str:
    return ts.isoformat()


def _layout(title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title},
        "xaxis": {"title": {"text": "time (UTC)"}, "type": "date"},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero"},
        "hovermode": "x unified",
        "legend": {"orientation": "h", "y": -0.3},
        "margin": {"l": 60, "r": 60, "t": 50, "b": 90},
    }
    layout.update(extra)
    return layout


def allocation_figure(series: Mapping[str, Sequence[Any]]) -> Figure:
    """Per pool: allocation in cards and in compute milli (%) and mean SM utilization (%) over time.

    `series`: pool name → points with ts, allocation_cards_percent, allocation_milli_percent,
    utilization_percent."""
    data = []
    for pool, points in sorted(series.items()):
        color = pool_color(pool)
        x = [_iso(p.ts) for p in points]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{pool} allocation (compute)",
                "x": x,
                "y": [p.allocation_milli_percent for p in points],
                "line": {"color": color, "width": 2},
                "hovertemplate": "%{y:.1f}% of compute allocated<extra>" + pool + "</extra>",
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{pool} allocation (cards)",
                "x": x,
                "y": [p.allocation_cards_percent for p in points],
                "line": {"color": color, "width": 1, "dash": "dot"},
                "hovertemplate": "%{y:.1f}% of cards hold work<extra>" + pool + "</extra>",
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{pool} SM utilization",
                "x": x,
                "y": [p.utilization_percent for p in points],
                "line": {"color": color, "width": 2, "dash": "dash"},
                "hovertemplate": "%{y:.1f}% mean SM<extra>" + pool + "</extra>",
            }
        )
    return {
        "data": data,
        "layout": _layout(
            "GPU allocation and utilization per pool",
            "percent of schedulable capacity",
            yaxis={"title": {"text": "percent"}, "range": [0, 105], "ticksuffix": "%"},
        ),
    }


def pending_figure(series: Mapping[str, Sequence[Any]]) -> Figure:
    """Per pool: mean number of pending GPU workloads per period (stacked areas)."""
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "stackgroup": "pending",
            "name": pool,
            "x": [_iso(p.ts) for p in points],
            "y": [p.pending for p in points],
            "line": {"color": pool_color(pool)},
            "hovertemplate": "%{y:.1f} waiting<extra>" + pool + "</extra>",
        }
        for pool, points in sorted(series.items())
    ]
    return {"data": data, "layout": _layout("Pending queue depth", "GPU workloads waiting")}


def wait_figure(series: Mapping[str, Sequence[Any]]) -> Figure:
    """Per pool: p50 and p95 of submit → placed wait, in minutes (periods without placements are gaps)."""
    data = []
    for pool, points in sorted(series.items()):
        x = [_iso(p.ts) for p in points]
        for label, attr, dash in (
            ("p50", "wait_p50_seconds", "solid"),
            ("p95", "wait_p95_seconds", "dot"),
        ):
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": f"{pool} {label}",
                    "x": x,
                    "y": [
                        None if getattr(p, attr) is None else round(getattr(p, attr) / 60, 2)
                        for p in points
                    ],
                    "connectgaps": False,
                    "marker": {"size": 3},
                    "line": {"color": pool_color(pool), "dash": dash},
                    "hovertemplate": f"{label} %{{y:.1f}} min<extra>{pool}</extra>",
                }
            )
    return {"data": data, "layout": _layout("Wait time, submit → placed", "minutes")}


def tenant_quota_figure(slug: str, points: Sequence[Any]) -> Figure:
    """A tenant's allocated GPUs vs its quotas' min / max / runtime share, and what it borrows."""
    x = [_iso(p.ts) for p in points]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "allocated",
            "x": x,
            "y": [p.allocated for p in points],
            "fill": "tozeroy",
            "line": {"color": tenant_color(slug), "width": 2},
            "hovertemplate": "%{y:.2f} GPUs allocated<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "borrowed",
            "x": x,
            "y": [p.borrowed for p in points],
            "line": {"color": QUOTA_COLORS["borrowed"], "width": 1},
            "hovertemplate": "%{y:.2f} GPUs borrowed<extra></extra>",
        },
    ]
    for key, dash in (("min", "dash"), ("max", "dot"), ("runtime", "dashdot")):
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "runtime share" if key == "runtime" else key,
                "x": x,
                "y": [getattr(p, key) for p in points],
                "line": {"color": QUOTA_COLORS[key], "dash": dash, "width": 1.5},
                "hovertemplate": "%{y:.2f} GPUs " + key + "<extra></extra>",
            }
        )
    return {"data": data, "layout": _layout("Allocated vs quota", "GPUs (1 = one card)")}


def tenant_utilization_figure(slug: str, points: Sequence[Any]) -> Figure:
    """A tenant's used vs idle allocation (GPUs, stacked) and its utilization % (right axis)."""
    x = [_iso(p.ts) for p in points]
    data = [
        {
            "type": "bar",
            "name": "used (SM-weighted)",
            "x": x,
            "y": [p.used for p in points],
            "marker": {"color": tenant_color(slug)},
            "hovertemplate": "%{y:.2f} GPUs of work<extra></extra>",
        },
        {
            "type": "bar",
            "name": "idle allocation",
            "x": x,
            "y": [p.idle for p in points],
            "marker": {"color": "#cbd5e1"},
            "hovertemplate": "%{y:.2f} GPUs idle (<5% SM)<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "utilization",
            "yaxis": "y2",
            "x": x,
            "y": [p.utilization_percent for p in points],
            "line": {"color": "#111827", "width": 1.5},
            "hovertemplate": "%{y:.1f}% of allocation used<extra></extra>",
        },
    ]
    return {
        "data": data,
        "layout": _layout(
            "Used and idle allocation",
            "GPUs",
            barmode="stack",
            yaxis2={
                "title": {"text": "utilization"},
                "overlaying": "y",
                "side": "right",
                "range": [0, 105],
                "ticksuffix": "%",
            },
        ),
    }


def wasting_figure(slug: str, rows: Sequence[Any]) -> Figure:
    """Horizontal bars: codespaces with the most idle allocated GPU-hours."""
    ordered = list(reversed(rows))
    annotations = (
        []
        if rows
        else [
            {
                "text": "No codespace held idle GPU time in this range",
                "showarrow": False,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
            }
        ]
    )
    return {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "name": "idle GPU-hours",
                "x": [r.idle_gpu_hours for r in ordered],
                "y": [r.name for r in ordered],
                "marker": {"color": tenant_color(slug)},
                "customdata": [[r.allocated_gpu_hours, r.utilization_percent] for r in ordered],
                "hovertemplate": (
                    "%{y}: %{x:.2f} idle GPU-h of %{customdata[0]:.2f} allocated"
                    " (%{customdata[1]:.1f}% used)<extra></extra>"
                ),
            }
        ],
        "layout": {
            "title": {"text": "Codespaces wasting most (idle allocated GPU-hours)"},
            "xaxis": {"title": {"text": "GPU-hours idle"}, "rangemode": "tozero"},
            "yaxis": {"automargin": True},
            "margin": {"l": 140, "r": 20, "t": 50, "b": 50},
            "annotations": annotations,
        },
    }


def fragmentation_heatmap(
    nodes: Sequence[str],
    columns: int,
    values: Sequence[Sequence[float | None]],
    *,
    title: str,
    unit: str,
    maximum: float | None = None,
    hover: Sequence[Sequence[str | None]] | None = None,
) -> Figure:
    """Heatmap nodes × GPU index of free capacity; `None` cells (no GPU, unhealthy) stay blank. Give
    values as a share of each card (`maximum` = a whole free card) so a free card of any size has the
    free colour; `hover` is what each cell's tooltip says instead of the value (e.g. "16 of 16 GiB")."""
    trace: dict[str, Any] = {
        "type": "heatmap",
        "x": [f"GPU {j}" for j in range(columns)],
        "y": list(nodes),
        "z": [list(row) for row in values],
        "zmin": 0,
        "zmax": maximum,
        "colorscale": [[0, "#1e1b4b"], [0.5, "#6366f1"], [1, "#e0f2fe"]],
        "colorbar": {"title": {"text": unit}},
        "hoverongaps": False,
        "hovertemplate": "%{y} %{x}: %{z} " + unit + " free<extra></extra>",
    }
    if hover is not None:
        trace["customdata"] = [list(row) for row in hover]
        trace["hovertemplate"] = "%{y} %{x}: %{customdata} free (%{z} " + unit + ")<extra></extra>"
    return {
        "data": [trace],
        "layout": {
            "title": {"text": title},
            "xaxis": {"side": "top"},
            "yaxis": {"title": {"text": "node"}, "autorange": "reversed", "automargin": True},
            "margin": {"l": 120, "r": 20, "t": 70, "b": 20},
            "height": max(320, min(2400, 22 * len(nodes) + 120)),
        },
    }


def slice_fit_figure(label: str, fits: Mapping[str, int], top: int = 25) -> Figure:
    """Bars: how many more slices of a preset fit per node (the nodes with most room first)."""
    ranked = sorted(fits.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    total = sum(fits.values())
    return {
        "data": [
            {
                "type": "bar",
                "name": label,
                "x": [name for name, _ in ranked],
                "y": [count for _, count in ranked],
                "marker": {"color": "#4f46e5"},
                "hovertemplate": "%{x}: %{y} more<extra>" + label + "</extra>",
            }
        ],
        "layout": {
            "title": {"text": f"{total} more “{label}” fit — where (top {len(ranked)} nodes)"},
            "xaxis": {"title": {"text": "node"}, "automargin": True},
            "yaxis": {"title": {"text": "slices that fit"}, "rangemode": "tozero"},
            "margin": {"l": 60, "r": 20, "t": 50, "b": 90},
        },
    }


def savings_figure(points: Sequence[Any]) -> Figure:
    """Codespace slicing: whole cards needed without slicing vs cards the slices occupy."""
    x = [_iso(p.ts) for p in points]
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines",
                "name": "cards needed without slicing",
                "x": x,
                "y": [p.cards_unsliced for p in points],
                "line": {"color": "#dc2626", "width": 2},
                "hovertemplate": "%{y:.1f} cards without slicing<extra></extra>",
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "cards occupied by slices",
                "x": x,
                "y": [p.cards_occupied for p in points],
                "fill": "tozeroy",
                "line": {"color": "#16a34a", "width": 2},
                "hovertemplate": "%{y:.1f} cards occupied<extra></extra>",
            },
        ],
        "layout": _layout("Codespace savings from slicing", "GPU cards"),
    }


def chargeback_figure(rows: Sequence[Any], currency: str | None = None) -> Figure:
    """Stacked bars per month: charge per tenant (one colour per tenant) in `currency` (default: the
    configured TESSERA_CHARGEBACK_CURRENCY), GPU-hours in the hover."""
    if currency is None:
        from django.conf import settings

        currency = str(settings.TESSERA_CHARGEBACK_CURRENCY)
    months = sorted({r.month for r in rows})
    by_tenant: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        cell = by_tenant.setdefault(r.tenant_slug, {}).setdefault(r.month, [0.0, 0.0, 0.0])
        cell[0] += float(r.cost)
        cell[1] += r.allocated_gpu_hours
        cell[2] += r.used_gpu_hours
    data = []
    for slug in sorted(by_tenant):
        cells = by_tenant[slug]
        data.append(
            {
                "type": "bar",
                "name": slug,
                "x": months,
                "y": [round(cells.get(m, [0.0])[0], 2) for m in months],
                "customdata": [
                    [round(cells.get(m, [0, 0, 0])[1], 1), round(cells.get(m, [0, 0, 0])[2], 1)]
                    for m in months
                ],
                "marker": {"color": tenant_color(slug)},
                "hovertemplate": (
                    "%{y:.2f} " + currency + " — %{customdata[0]} GPU-h allocated, "
                    "%{customdata[1]} used"
                    "<extra>" + slug + "</extra>"
                ),
            }
        )
    return {
        "data": data,
        "layout": {
            "title": {"text": "Chargeback per month"},
            "barmode": "stack",
            "xaxis": {"title": {"text": "month"}, "type": "category"},
            "yaxis": {"title": {"text": f"charge ({currency})"}, "rangemode": "tozero"},
            "legend": {"orientation": "h", "y": -0.2},
            "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
        },
    }


def what_if_figure(
    title: str, y_title: str, runs: Sequence[tuple[str, Sequence[float], Sequence[float]]]
) -> Figure:
    """Side-by-side step series of what-if replays: each run is (label, hours, values)."""
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "line": {"shape": "hv", "color": PALETTE[k % len(PALETTE)], "width": 2},
            "name": label,
            "x": list(hours),
            "y": list(values),
            "hovertemplate": "%{y:.2f} " + y_title + " at %{x:.1f} h<extra>" + label + "</extra>",
        }
        for k, (label, hours, values) in enumerate(runs)
    ]
    layout = _layout(title, y_title, xaxis={"title": {"text": "hours into the window"}})
    return {"data": data, "layout": layout}
